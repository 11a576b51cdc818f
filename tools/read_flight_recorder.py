"""Evidence from Flight Recorder dumps: which collective every rank reached, per group.

PyTorch's Flight Recorder (TORCH_FR_BUFFER_SIZE) keeps each rank's last collectives; NCCL
dumps them on a timeout (TORCH_NCCL_DUMP_ON_TIMEOUT, files named
TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank), and any backend dumps on request with
`torch._C._distributed_c10d._dump_fr_trace()` (pickle) or `_dump_fr_trace_json()`.
This tool reads one dump per rank, with any file names, pickles through the restricted
unpickler only, and aligns the ranks per process group: where each group is stuck, and
which ranks are not there. Dumps that are missing, cut off or refused become gaps; the
analysis goes on with the rest. Other pickles and JSON files (memory snapshots, configs)
are skipped silently, as `read_memory` skips these. The reading and the analysis are
`triage.readers.flight_recorder`'s; this tool takes the inputs, bounds them, and turns
the result into evidence and gaps.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from triage.models import Evidence, Gap
from triage.observations import FROutlier, FROverview, FRP2PWait, FRSide, FRStuckGroup
from triage.readers.flight_recorder import (
    Analysis,
    analyze_files,
    find_dump_files,
    outlier_payload,
    overview,
    p2p_payload,
    stuck_payload,
    summarize,
)
from triage.registry import ToolError, ToolOutput, tool
from triage.text import format_ranks

MAX_FILES = 100_000
MAX_FILE_GAPS = 20
CAPTURE_HINT = (
    "dump every rank: NCCL writes them on a timeout with TORCH_FR_BUFFER_SIZE=2000 "
    "TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/shared/fr/rank_; on "
    "gloo call torch._C._distributed_c10d._dump_fr_trace() in each rank (e.g. from a "
    "signal handler) and write the bytes to one file per rank"
)


@tool(name="read_flight_recorder")
def read_flight_recorder(
    pickle_files: list[str] | None = None,
    json_files: list[str] | None = None,
    flight_recorder_dir: str | None = None,
) -> ToolOutput:
    """Read PyTorch Flight Recorder dumps (one per rank: NCCL dump-on-timeout files,
    _dump_fr_trace pickles or JSON, any file names, torch 2.6 to today; pickles through a
    restricted unpickler) and align every rank's collectives per process group by sequence
    number: where each group is stuck, ranks that never enqueued the collective others
    wait in, different ops or sizes at one sequence number, unmatched send/recv, ranks
    with no dump. Other pickles and JSON files are skipped."""
    candidates = list(dict.fromkeys([*(pickle_files or []), *(json_files or [])]))
    gaps: list[Gap] = []
    if flight_recorder_dir:
        folder = Path(flight_recorder_dir)
        if not folder.is_dir():
            raise ToolError(f"{flight_recorder_dir}: no such directory")
        given = set(candidates)
        candidates += [p for p in find_dump_files(folder, MAX_FILES) if p not in given]
    if not candidates:
        raise ToolError("no dump files to read", "pass the folder the ranks dumped into")
    job = analyze_files(candidates)
    analysis = job.analysis
    if analysis is None and not job.unreadable:
        if flight_recorder_dir:
            raise ToolError(f"{flight_recorder_dir} holds no Flight Recorder dumps", CAPTURE_HINT)
        return ToolOutput(text="no Flight Recorder dumps among the files")
    if analysis is None:
        text = f"none of {len(job.unreadable)} Flight Recorder dumps could be read"
        return ToolOutput(gaps=_file_gaps(job.unreadable), text=text)
    gaps += _file_gaps(job.unreadable)
    gaps += _coverage_gaps(analysis)
    evidence = _evidence(analysis)
    head = evidence[0].summary
    lines = [head] + [e.summary for e in evidence[1:] if e.kind != "fr_outlier"][:8]
    return ToolOutput(evidence=evidence, gaps=gaps, text="\n".join(lines))


def _file_gaps(unreadable: list[tuple[str, str]]) -> list[Gap]:
    gaps = [
        Gap(source=path, reason=reason, hint=CAPTURE_HINT, tool="read_flight_recorder")
        for path, reason in unreadable[:MAX_FILE_GAPS]
    ]
    if len(unreadable) > MAX_FILE_GAPS:
        reasons = Counter(reason for _, reason in unreadable[MAX_FILE_GAPS:])
        gaps.append(
            Gap(
                source=f"{len(unreadable) - MAX_FILE_GAPS} more files",
                reason="; ".join(f"{n} x {r}" for r, n in reasons.most_common(3)),
                tool="read_flight_recorder",
            )
        )
    return gaps


def _coverage_gaps(analysis: Analysis) -> list[Gap]:
    gaps = []
    if analysis.missing:
        gaps.append(
            Gap(
                source="flight recorder",
                reason=f"no dump from rank {format_ranks(analysis.missing)} of "
                f"{len(analysis.world)}: exited, never dumped, or its file was not collected",
                hint=CAPTURE_HINT,
                tool="read_flight_recorder",
            )
        )
    for kept, dropped in analysis.duplicates[:5]:
        gaps.append(
            Gap(
                source=dropped,
                reason=f"dump of the same rank as {kept}: that one was read",
                tool="read_flight_recorder",
            )
        )
    renamed = [d for d in analysis.dumps.values() if d.name_rank not in (None, d.rank)]
    for dump in renamed[:5]:
        gaps.append(
            Gap(
                source=dump.path,
                reason=f"named rank {dump.name_rank} but its process groups say rank "
                f"{dump.rank}; read as rank {dump.rank}",
                tool="read_flight_recorder",
            )
        )
    return gaps


def _evidence(analysis: Analysis) -> list[Evidence]:
    world = len(analysis.world)
    summary = overview(analysis)
    backends = ", ".join(summary.backends) or "unknown backend"
    versions = ", ".join(summary.versions) or "?"
    roots = [f"group {p.group.name} at seq {p.seq}" for p in analysis.stuck if p.root]
    stuck = (
        f"{len(analysis.stuck)} stuck, where the ranks part: {', '.join(roots[:3])}"
        if analysis.stuck
        else "no group has unfinished collectives"
    )
    head = (
        f"Flight Recorder: {summary.dumps} rank dumps ({backends}, format {versions}), "
        f"{summary.entries} entries, {summary.groups} process groups, {stuck}"
        + (f"; no dump from rank {format_ranks(summary.missing)}" if summary.missing else "")
    )
    items = [
        Evidence(
            id="fr:overview",
            kind=FROverview.EVIDENCE_KIND,
            source=_source(analysis),
            summary=head,
            data=summary.model_dump(exclude_defaults=True),
        )
    ]
    seen: set[str] = set()
    for point in analysis.stuck:
        payload = stuck_payload(point, world)
        if payload.evidence_id() in seen:
            continue  # a group name reused by split_group: the first stuck one is shown
        seen.add(payload.evidence_id())
        items.append(
            Evidence(
                id=payload.evidence_id(),
                kind=FRStuckGroup.EVIDENCE_KIND,
                source=_source(analysis),
                summary=summarize(payload),
                data=payload.model_dump(exclude_defaults=True),
            )
        )
        if point.root:
            items += [_outlier(payload, s, analysis) for s in payload.sides if s.state != "waiting"]
    for wait in analysis.p2p:
        waiting = p2p_payload(wait, analysis)
        kind = "cycle" if wait.cycle else f"chain to rank {wait.sink} ({wait.sink_state})"
        items.append(
            Evidence(
                id=f"fr:p2p:{format_ranks(wait.ranks)[:40]}",
                kind=FRP2PWait.EVIDENCE_KIND,
                source=_source(analysis),
                rank=wait.ranks[0] if len(wait.ranks) == 1 else None,
                summary=f"ranks {format_ranks(wait.ranks)} wait in send/recv no peer matches: {kind}; "
                + "; ".join(f"rank {r} in {op.text}" for r, op in list(waiting.ops.items())[:4]),
                data=waiting.model_dump(exclude_defaults=True),
            )
        )
    return items


def _outlier(point: FRStuckGroup, side: FRSide, analysis: Analysis) -> Evidence:
    """Ranks not where their group waits: the evidence a finding about them cites."""
    payload = outlier_payload(point, side)
    rank = side.ranks[0] if len(side.ranks) == 1 else None
    dump = analysis.dumps.get(rank) if rank is not None else None
    return Evidence(
        id=point.side_evidence_id(side),
        kind=FROutlier.EVIDENCE_KIND,
        source=dump.path if dump else _source(analysis),
        rank=rank,
        summary=f"group {point.group} seq {point.seq}: {side.describe()}",
        data=payload.model_dump(exclude_defaults=True),
    )


def _source(analysis: Analysis) -> str:
    folders = {str(Path(d.path).parent) for d in analysis.dumps.values()}
    return folders.pop() if len(folders) == 1 else f"{len(analysis.dumps)} dump files"
