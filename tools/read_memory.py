"""Evidence from GPU memory dumps: CUDA memory snapshots and memory_stats() JSON.

Each file is read by `triage.readers.memory_snapshots` (pickles through the restricted
unpickler): allocated vs reserved memory, fragmentation, the top allocation sites by
user line, the OOM of the allocator's trace, and growth across the dumps of one device.
Pickles and JSON that are not memory data, such as Flight Recorder dumps, are skipped
silently; dumps too big, corrupt or refused by the unpickler become gaps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from triage.models import Evidence, Gap
from triage.observations import AllocationSite, MemoryDump, MemoryGrowth
from triage.readers.memory_snapshots import (
    NotMemory,
    ParsedDump,
    UnreadableMemoryDump,
    memory_growth,
    read_json,
    read_pickle,
)
from triage.readers.safe_pickle import UntrustedPickleError
from triage.readers.signatures.memory import format_size
from triage.registry import ToolError, ToolOutput, tool

SNAPSHOT_HINT = (
    "save snapshots with torch.cuda.memory._dump_snapshot(path) after "
    "torch.cuda.memory._record_memory_history(max_entries=100000)"
)


@tool(name="read_memory")
def read_memory(
    pickle_files: list[str] | None = None, json_files: list[str] | None = None
) -> ToolOutput:
    """Read CUDA memory snapshots (torch.cuda.memory._dump_snapshot pickles, loaded with a
    restricted unpickler) and torch.cuda.memory_stats() dumps saved as JSON: allocated vs
    reserved memory, fragmentation (largest free block vs the failed request, inactive split
    bytes), the top allocation sites by user line, and growth across dumps of one device
    (a leak). Other pickles and JSON files (Flight Recorder dumps, configs) are skipped."""
    if not pickle_files and not json_files:
        raise ToolError("no pickle or JSON files to read")
    parsed: list[ParsedDump] = []
    gaps: list[Gap] = []
    for name in pickle_files or []:
        _read_one(name, read_pickle, gaps, parsed)
    for name in json_files or []:
        _read_one(name, read_json, gaps, parsed)
    ids: Counter[str] = Counter()
    evidence = [_dump_evidence(p, ids) for p in parsed]
    evidence += [_growth_evidence(g, ids) for g in memory_growth(parsed)]
    dumps = len(parsed)
    text = f"{dumps} memory dumps" if dumps else "no memory snapshots or memory_stats dumps"
    return ToolOutput(evidence=evidence, gaps=gaps, text=text)


def _read_one(
    name: str, reader: Callable[[Path], list[ParsedDump]], gaps: list[Gap], parsed: list[ParsedDump]
) -> None:
    path = Path(name)
    try:
        parsed += reader(path)
    except NotMemory:
        return
    except UntrustedPickleError as exc:
        gaps.append(Gap(source=name, reason=exc.reason, hint=SNAPSHOT_HINT, tool="read_memory"))
    except UnreadableMemoryDump as exc:
        gaps.append(Gap(source=name, reason=str(exc), hint=SNAPSHOT_HINT, tool="read_memory"))
    except OSError as exc:
        reason = f"cannot read: {exc.strerror or exc}"
        gaps.append(Gap(source=name, reason=reason, tool="read_memory"))


# --- evidence ----------------------------------------------------------------------------


def _unique(ids: Counter[str], base: str) -> str:
    ids[base] += 1
    return base if ids[base] == 1 else f"{base}#{ids[base]}"


def _site_text(site: AllocationSite) -> str:
    return f"{Path(site.frame.file).name}:{site.frame.line} {format_size(site.bytes)}"


def _dump_evidence(parsed: ParsedDump, ids: Counter[str]) -> Evidence:
    dump = parsed.dump
    path = Path(dump.path)
    parts = [dump.format + (f" device {dump.device}" if dump.device is not None else "")]
    if dump.label and dump.format != "snapshot":
        parts[0] += f" [{dump.label}]"
    if dump.allocated is not None and dump.reserved is not None:
        parts.append(
            f"{format_size(dump.allocated)} allocated of {format_size(dump.reserved)} reserved"
        )
    if dump.inactive and dump.largest_free_block is not None:
        parts.append(f"largest free block {format_size(dump.largest_free_block or 0)}")
    if dump.inactive_split:
        parts.append(f"{format_size(dump.inactive_split)} free inside split segments")
    if dump.oom_requested is not None:
        parts.append(f"OOM on a {format_size(dump.oom_requested)} request")
    if dump.num_ooms:
        parts.append(f"{dump.num_ooms} OOMs, {dump.num_alloc_retries or 0} alloc retries")
    if dump.top_sites:
        parts.append("top sites " + ", ".join(_site_text(s) for s in dump.top_sites[:3]))
    if dump.trace_growth:
        parts.append(f"memory floor rose {format_size(dump.trace_growth)} over the trace")
    if dump.unfreed_sites:
        parts.append("never freed " + ", ".join(_site_text(s) for s in dump.unfreed_sites[:3]))
    label = f":{dump.label.replace(' ', '')}" if dump.label else ""
    return Evidence(
        id=_unique(ids, f"memory:{path.parent.name}/{path.name}{label}"),
        kind=MemoryDump.EVIDENCE_KIND,
        source=dump.path,
        rank=dump.rank,
        summary="; ".join(parts),
        data=dump.model_dump(exclude_defaults=True),
    )


def _growth_evidence(growth: MemoryGrowth, ids: Counter[str]) -> Evidence:
    first, last = growth.points[0], growth.points[-1]
    who = f"rank {growth.rank} " if growth.rank is not None else ""
    where = f"device {growth.device}" if growth.device is not None else "one device"
    trend = "grew" if growth.growth > 0 else "did not grow"
    summary = (
        f"{who}{where}: allocated {trend} from {format_size(first.allocated or 0)} to "
        f"{format_size(last.allocated or 0)} over {len(growth.points)} dumps"
        + (" (every dump higher)" if growth.monotonic and growth.growth > 0 else "")
    )
    if growth.growing_sites:
        summary += "; grew most at " + ", ".join(_site_text(s) for s in growth.growing_sites[:3])
    folder = Path(growth.paths[0]).parent.name
    who_id = f"rank{growth.rank}" if growth.rank is not None else "device"
    return Evidence(
        id=_unique(
            ids,
            f"memory_growth:{folder}/{who_id}{growth.device if growth.device is not None else ''}",
        ),
        kind=MemoryGrowth.EVIDENCE_KIND,
        source=growth.paths[0] if len(growth.paths) == 1 else f"{len(growth.paths)} files",
        rank=growth.rank,
        summary=summary,
        data=growth.model_dump(exclude_defaults=True),
    )
