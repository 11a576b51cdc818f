"""Every rank's Python stacks and Flight Recorder, through PyTorch's debug server.

A job that called `torch.distributed.debug.start_debug_server(port=P)` on every rank (torch
2.10+) can be read from anywhere that reaches rank 0's host, on any scheduler: its frontend
names every rank's worker, and each worker answers with its rank's stacks (faulthandler's
text of every thread) and Flight Recorder (JSON). The stacks go through the parser of stack
dumps in logs (`triage.readers.logscan`) and the classification of py-spy dumps
(`triage.readers.stacks`), the dumps through the reader of dump files, so the stack and
Flight Recorder rules run as they do for `--pids`. A rank that does not answer is a gap that
names it and why; nothing here says its process exited.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from triage.models import Gap
from triage.observations import RankState
from triage.readers.debug_server import DebugServer, DebugServerError, Reply, parse_address
from triage.readers.flight_recorder import (
    Analysis,
    NotFlightRecorder,
    RankDump,
    UnreadableDump,
    analyze_dumps,
    parse_dump,
)
from triage.readers.flight_recorder.evidence_items import analysis_evidence, coverage_gaps
from triage.readers.logscan import dump_state, scan_file
from triage.readers.stacks import stack_evidence
from triage.registry import ToolError, ToolOutput, tool
from triage.text import format_ranks

STACKS = "dump_traceback"
#: The CPU recorder (gloo and other CPU backends), then NCCL's; a rank's fuller one is read.
FR_HANDLERS = ("fr_trace_json", "dump_nccl_trace_json")
MAX_RANK_GAPS = 20
START_HINT = (
    "start PyTorch's debug server on every rank after init_process_group:"
    " torch.distributed.debug.start_debug_server(port=PORT) (torch 2.10+, with tabulate,"
    " requests, aiohttp and Jinja2 installed), or triage.probe.install(debug_server_port=PORT);"
    " then pass rank 0's host and that port"
)


@tool(name="read_debug_server")
def read_debug_server(debug_server: str, timeout_s: float = 10.0) -> ToolOutput:
    """Read every rank's Python stacks and Flight Recorder through PyTorch's debug server
    (`torch.distributed.debug.start_debug_server`, torch 2.10+) at HOST:PORT, rank 0's
    frontend: all ranks' workers are asked in parallel, each request within `timeout_s`;
    each rank's main-thread stack is classified (the op it waits in, the user line) and
    the Flight Recorder dumps are aligned per process group. Ranks that do not answer, or
    never registered a worker, become gaps."""
    try:
        host, port = parse_address(debug_server)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    server = DebugServer(host, port, timeout_s)
    try:
        workers = server.workers()
    except DebugServerError as exc:
        raise ToolError(str(exc), START_HINT) from None
    replies = server.ask(workers, (STACKS, *FR_HANDLERS))
    missing: dict[int, list[str]] = {}
    states = _stacks(workers, replies, missing)
    evidence = [
        stack_evidence(state, f"{workers[rank]}/handler/{STACKS}", "debug server", ":debug-server")
        for rank, state in states.items()
    ]
    dumps = _dumps(workers, replies, missing)
    _locate(dumps, states)
    analysis = analyze_dumps(dumps) if any(d.entries for d in dumps) else None
    where = f"debug server {server.address}"
    gaps = _rank_gaps(workers, missing) + _job_gaps(where, workers, dumps, analysis)
    if analysis is not None:
        evidence += analysis_evidence(analysis, where)
        gaps += coverage_gaps(analysis, "read_debug_server", START_HINT)
    text = (
        f"debug server {server.address}: {len(workers)} ranks registered, {len(states)} stacks"
        f" read, {len(dumps)} Flight Recorder dumps"
        + (f", {len(analysis.stuck)} stuck process groups" if analysis else "")
    )
    return ToolOutput(evidence=evidence, gaps=gaps, text=text)


def _stacks(
    workers: dict[int, str], replies: dict[tuple[int, str], Reply], missing: dict[int, list[str]]
) -> dict[int, RankState]:
    """Each rank's main thread, classified; the dump is parsed as a rank's log would be."""
    states: dict[int, RankState] = {}
    with tempfile.TemporaryDirectory(prefix="triage-debug-server-") as scratch:
        for rank, url in sorted(workers.items()):
            reply = replies[(rank, STACKS)]
            if reply.body is None:
                missing.setdefault(rank, []).append(f"no stacks ({reply.error})")
                continue
            dump = Path(scratch) / f"rank{rank}.txt"
            dump.write_bytes(reply.body)
            found = [s for r in scan_file(dump).tracebacks if (s := dump_state(r)) is not None]
            if not found:
                missing.setdefault(rank, []).append("no Python frame of its main thread")
                continue
            state = found[-1]  # faulthandler lists the newest thread first, the main one last
            host = urlsplit(url).hostname or ""
            state.rank, state.host, state.node = rank, host, host
            states[rank] = state
    return states


def _dumps(
    workers: dict[int, str], replies: dict[tuple[int, str], Reply], missing: dict[int, list[str]]
) -> list[RankDump]:
    """Each rank's fuller Flight Recorder: the CPU one on gloo, NCCL's on NCCL."""
    dumps: list[RankDump] = []
    for rank, url in sorted(workers.items()):
        read: list[RankDump] = []
        errors: list[str] = []
        for name in FR_HANDLERS:
            body = replies[(rank, name)].body
            if body is None:
                errors.append(f"{name}: {replies[(rank, name)].error}")
                continue
            try:
                read.append(parse_dump(f"{url}/handler/{name}", _with_rank(body, rank)))
            except (NotFlightRecorder, UnreadableDump) as exc:
                errors.append(f"{name}: {str(exc) or 'not a Flight Recorder dump'}")
        if read:
            dumps.append(max(read, key=lambda d: d.entries))
        else:
            missing.setdefault(rank, []).append(f"no Flight Recorder dump ({'; '.join(errors)})")
    return dumps


def _locate(dumps: list[RankDump], states: dict[int, RankState]) -> None:
    """The user line of the op each rank blocks in, from its stack: a worker's Flight
    Recorder JSON holds no stack frames, and a rank's newest op, unfinished and the op its
    main thread waits in now, is the call that stack shows. The Flight Recorder rules then
    read the source around it, as they do with frames a pickled dump carries."""
    for dump in dumps:
        state, last = states.get(dump.rank), dump.last
        if state is None or state.user_frame is None or last is None:
            continue
        if not last.done and last.frame is None and last.op == state.op:
            user = state.user_frame
            last.frame, last.frames_read = (user.function, user.file, user.line), True


def _with_rank(body: bytes, rank: int) -> bytes:
    """The rank put into the dump, as torch's frontend does: a worker's dump does not say
    whose it is (a key of its own, if it has one, comes later and wins)."""
    start = body.lstrip()
    if not start.startswith(b"{"):
        return body
    rest = start[1:].lstrip()
    return b'{"rank": %d%s' % (rank, b"" if rest.startswith(b"}") else b", ") + rest


def _job_gaps(
    where: str, workers: dict[int, str], dumps: list[RankDump], analysis: Analysis | None
) -> list[Gap]:
    """Ranks that registered no worker (the Flight Recorder's groups may know of more), and
    recorders that hold nothing."""
    gaps = []
    expected = set(range(max(workers) + 1)) | set(analysis.world if analysis else ())
    unregistered = sorted(expected - set(workers))
    if unregistered:
        gaps.append(
            Gap(
                source=where,
                reason=f"rank {format_ranks(unregistered)} registered no worker: not started"
                " there (yet), or it failed",
                hint=START_HINT,
                tool="read_debug_server",
            )
        )
    if dumps and analysis is None:
        gaps.append(
            Gap(
                source=where,
                reason="every rank's Flight Recorder is empty: TORCH_FR_BUFFER_SIZE=0, or no"
                " collective ran yet",
                hint="set TORCH_FR_BUFFER_SIZE=2000 in the job's environment",
                tool="read_debug_server",
            )
        )
    return gaps


def _rank_gaps(workers: dict[int, str], missing: dict[int, list[str]]) -> list[Gap]:
    """One gap per rank that did not give all it was asked for; past MAX_RANK_GAPS ranks,
    one for the rest with their commonest reasons."""
    gaps = [
        Gap(
            source=f"rank {rank} ({workers[rank]})",
            reason="; ".join(reasons),
            hint="a worker answers while its rank waits in a collective; one that does not may"
            " be held by a thread that keeps the GIL, or be unreachable from here",
            tool="read_debug_server",
        )
        for rank, reasons in sorted(missing.items())[:MAX_RANK_GAPS]
    ]
    rest = sorted(missing.items())[MAX_RANK_GAPS:]
    if rest:
        reasons = Counter(reason for _, why in rest for reason in why)
        gaps.append(
            Gap(
                source=f"rank {format_ranks([rank for rank, _ in rest])}",
                reason="; ".join(f"{n} x {r}" for r, n in reasons.most_common(3)),
                tool="read_debug_server",
            )
        )
    return gaps
