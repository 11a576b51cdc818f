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

from triage.models import Gap
from triage.readers.flight_recorder import analyze_files, find_dump_files
from triage.readers.flight_recorder.evidence_items import (
    CAPTURE_HINT,
    analysis_evidence,
    coverage_gaps,
)
from triage.registry import ToolError, ToolOutput, tool

MAX_FILES = 100_000
MAX_FILE_GAPS = 20


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
    gaps += coverage_gaps(analysis, "read_flight_recorder")
    evidence = analysis_evidence(analysis)
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
