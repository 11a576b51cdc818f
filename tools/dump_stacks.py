"""Python stacks of live ranks, read with py-spy, all ranks at once.

py-spy (`triage.readers.pyspy`) pauses a process for a few milliseconds to read its
stacks; it never changes it. Ranks are dumped in parallel so 64 ranks take about as long
as one; each rank's main thread is classified (`triage.readers.stacks`) into the
collective or point-to-point op it blocks in, and the user line it came from.
"""

from __future__ import annotations

import socket

from triage.models import Evidence, Gap
from triage.observations import RankActivity, RankState
from triage.readers import pyspy
from triage.readers.stacks import (
    GROUP_SETUP_OPS,
    P2P_OPS,
    classify,
    frames_from_py_spy,
    gil_holder,
    pick_main_thread,
    stack_evidence,
)
from triage.registry import ToolError, ToolOutput, tool

INSTALL_HINT = "install py-spy (`pip install py-spy`, it ships the binary) or put it on PATH"


def find_py_spy() -> str:
    found = pyspy.binary()
    if not found:
        raise ToolError("py-spy is not installed", INSTALL_HINT)
    return found


def _needs_locals(dump: pyspy.Dump, ranks_by_pid: dict[int, int]) -> bool:
    if dump.pid not in ranks_by_pid:
        return True
    main = pick_main_thread(dump.threads or [])
    names = {str(f.get("name", "")).rsplit(".", 1)[-1] for f in (main or {}).get("frames") or []}
    return bool(names & (P2P_OPS | GROUP_SETUP_OPS))


def _stopped_state(
    binary: str, pid: int, rank: int | None, host: str, timeout_s: float
) -> RankState:
    """A stopped rank where it stopped: py-spy cannot pause it, but reads it without
    pausing (--nonblocking), consistently since nothing runs; with its locals when only
    mp.spawn's index can tell its rank."""
    dump = pyspy.dump_one(binary, pid, rank is None, timeout_s, nonblocking=True)
    main = pick_main_thread(dump.threads or [])
    frames = frames_from_py_spy(main) if main else []
    state = classify(frames, pid=pid, rank=rank, host=host, active=False)
    if state.rank is None:
        state.rank = _spawn_index(state)
    where = f" in {state.user_frame.function}" if state.user_frame else ""
    tracer = pyspy.tracer_of(pid)
    by = f"its tracer {tracer[1]} (pid {tracer[0]})" if tracer else "a signal"
    state.activity = RankActivity.stopped
    state.detail = (
        f"stopped by {by}{where} (read without pausing it)"
        if frames
        else f"stopped by {by} (its stack could not be read)"
    )
    return state


def _spawn_index(state: RankState) -> int | None:
    """mp.spawn passes the rank as `i` to torch.multiprocessing.spawn._wrap."""
    for frame in state.frames:
        if frame.function.endswith("_wrap") and "multiprocessing/spawn" in frame.file:
            value = frame.locals.get("i", "")
            return int(value) if value.isdigit() else None
    return None


@tool(name="dump_stacks")
def dump_stacks(
    pids: list[int],
    ranks_by_pid: dict[int, int] | None = None,
    with_locals: bool = True,
    timeout_s: float = 10.0,
) -> ToolOutput:
    """Dump every rank's Python stacks with py-spy, in parallel, and classify each rank:
    which collective or point-to-point op it blocks in, and at which user-code line.
    `with_locals` re-reads the ranks whose arguments matter (send/recv peers, unknown rank)."""
    binary = find_py_spy()
    ranks_by_pid = ranks_by_pid or {}
    host = socket.gethostname()
    dumps = pyspy.dump_all(binary, pids, False, timeout_s)
    if with_locals:
        # Locals cost a second read, so only ranks whose story needs them pay it:
        # point-to-point peers (src/dst) and mp.spawn ranks with no RANK in their env.
        again = [d.pid for d in dumps if d.threads is not None and _needs_locals(d, ranks_by_pid)]
        redone = {
            d.pid: d
            for d in pyspy.dump_all(binary, again, True, timeout_s)
            if d.threads is not None
        }
        dumps = [redone.get(d.pid, d) for d in dumps]
    evidence: list[Evidence] = []
    gaps: list[Gap] = []
    for dump in dumps:
        rank = ranks_by_pid.get(dump.pid)
        if dump.threads is None and pyspy.is_stopped(dump.pid):
            state = _stopped_state(binary, dump.pid, rank, host, timeout_s)
            evidence.append(stack_evidence(state, f"pid:{dump.pid}"))
            continue
        if dump.threads is None:
            gaps.append(
                Gap(
                    source=f"pid:{dump.pid}",
                    reason=dump.error or "no stack",
                    hint=dump.hint,
                    tool="dump_stacks",
                )
            )
            continue
        main = pick_main_thread(dump.threads)
        frames = frames_from_py_spy(main) if main else []
        active = bool(main.get("active")) if main else None
        state = classify(
            frames,
            pid=dump.pid,
            rank=rank,
            host=host,
            active=active,
            thread=str(main.get("thread_name") or "") if main else "",
        )
        if state.rank is None:
            state.rank = _spawn_index(state)
        holder = gil_holder(dump.threads, main)
        if holder is not None and not state.activity.waits_on_peers:
            name, frame = holder
            state.activity, state.user_frame = RankActivity.gil_held, frame
            state.detail = f"thread {name} holds the GIL in {frame.function}"
        evidence.append(stack_evidence(state, f"pid:{dump.pid}"))
    return ToolOutput(evidence=evidence, gaps=gaps)
