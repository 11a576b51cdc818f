"""GPU memory dumps read into MemoryDump observations: CUDA memory snapshots and
memory_stats() JSON, and growth across the dumps of one device.

`torch.cuda.memory._dump_snapshot()` pickles the caching allocator's state: every
segment (one cudaMalloc) with its blocks (live, pending free, or free for reuse)
and, when `_record_memory_history()` ran, the stack of every allocation and a
trace of allocator events, including the OOM with the size that failed. That is
enough to tell fragmentation (free blocks, none big enough) from a working set
that does not fit, to name the user lines that hold the memory, and to see memory
that grows and is never freed. `torch.cuda.memory_stats()` saved as JSON gives the
allocator's counters (allocated, reserved, inactive split bytes, retries, OOMs).

Pickles are loaded with a restricted unpickler (plain data only); pickles and JSON
that are not memory data, such as Flight Recorder dumps, raise NotMemory for the
caller to skip silently. Every loop over dump content is bounded: a crafted dump
costs bounded time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.observations import (
    AllocationSite,
    Frame,
    GrowthPoint,
    MemoryDump,
    MemoryGrowth,
    is_probe_snapshot,
)
from triage.readers.flight_recorder import looks_like_dump
from triage.readers.logscan import file_origin
from triage.readers.object_bounds import TooManyObjects, check_json
from triage.readers.safe_pickle import MAX_PICKLE_BYTES, read_bounded
from triage.readers.safe_pickle import load_untrusted as _load_pickle
from triage.readers.stacks import user_frame

MAX_JSON_BYTES = 256 << 20
PEEK = 64 << 10
MAX_SEGMENTS = 200_000
MAX_BLOCKS = 2_000_000
MAX_FRAMES = 96
MAX_TRACE_EVENTS = 1_000_000
TOP_SITES = 5
TRACE_WINDOWS = 8
MIN_TRACE_EVENTS = 50

_SNAPSHOT_MARKERS = (b"segments", b"device_traces")
_STATS_MARKERS = (b"allocated_bytes", b"reserved_bytes")
_DEVICE_KEY = re.compile(r"^(?:cuda:|device[ _]?|gpu[ _]?)(?P<n>\d+)$", re.IGNORECASE)
_DIGITS = re.compile(r"(\d+)")


class NotMemory(Exception):
    """The file is some other dump: skip it without a word."""


class UnreadableMemoryDump(Exception):
    """A memory dump that cannot be read: too big or corrupt."""


@dataclass
class ParsedDump:
    """One device's dump, with its allocation sites by user line (for growth)."""

    dump: MemoryDump
    sites: dict[tuple[str, str, int | None], AllocationSite] = field(default_factory=dict)


# --- reading ---------------------------------------------------------------------------


def _read_if_memory(path: Path, limit: int, markers: tuple[bytes, ...]) -> bytes:
    """The whole file when it may hold memory data; files over `limit` are refused
    when their head looks like memory data and skipped otherwise."""
    with path.open("rb") as handle:
        head = handle.read(PEEK)
    if looks_like_dump(head) or is_probe_snapshot(head):
        raise NotMemory  # a Flight Recorder dump or probe snapshot: each has its own tool
    if path.stat().st_size > limit:
        if any(marker in head for marker in markers):
            raise UnreadableMemoryDump(f"over the {limit}-byte limit for memory dumps: not loaded")
        raise NotMemory
    data = read_bounded(path, limit)
    if not any(marker in data for marker in markers):
        raise NotMemory  # never unpickle what cannot be a snapshot (Flight Recorder, models)
    return data


def read_pickle(path: Path) -> list[ParsedDump]:
    """One dump per device of a _dump_snapshot() pickle; raises NotMemory,
    UnreadableMemoryDump, UntrustedPickleError and OSError."""
    data = _read_if_memory(path, MAX_PICKLE_BYTES, _SNAPSHOT_MARKERS)
    snapshot = _load_pickle(data)
    if not _is_snapshot(snapshot):
        raise NotMemory
    return _snapshot_dumps(str(path), snapshot)


def read_json(path: Path) -> list[ParsedDump]:
    """The dumps of a JSON file: a snapshot (one per device), or memory_stats() dumps (one,
    a list of steps, JSON Lines, or a dict by device); raises like read_pickle."""
    data = _read_if_memory(path, MAX_JSON_BYTES, _SNAPSHOT_MARKERS + _STATS_MARKERS)
    text = data.decode("utf-8", "replace")
    try:
        check_json(data)
        payload: Any = json.loads(text)
    except TooManyObjects as exc:
        raise UnreadableMemoryDump(str(exc)) from None
    except ValueError:
        payload = _json_lines(text)
    except RecursionError:
        raise UnreadableMemoryDump("corrupt JSON: nested too deeply") from None
    if _is_snapshot(payload):
        return _snapshot_dumps(str(path), payload)
    entries = list(_stats_entries(payload))
    if not entries:
        raise NotMemory
    origin = file_origin(str(path))
    return [
        ParsedDump(_stats_dump(str(path), stats, label, device, origin.rank))
        for label, device, stats in entries
    ]


def _json_lines(text: str) -> list[Any]:
    """JSON Lines: one memory_stats() per step. A file with memory keys that is neither is
    a damaged dump (cut off while written)."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except (ValueError, RecursionError) as exc:
                raise UnreadableMemoryDump(f"corrupt JSON at line {number}: {exc}") from None
    return rows


def _is_snapshot(obj: Any) -> bool:
    segments = obj.get("segments") if isinstance(obj, dict) else None
    return isinstance(segments, list) and all(
        isinstance(s, dict) and "total_size" in s for s in segments[:16]
    )


# --- memory_stats() ----------------------------------------------------------------------


def _flatten(stats: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """memory_stats_as_nested_dict() to memory_stats()'s dotted keys (they nest 3 deep)."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if depth < 4:
                out |= _flatten(value, f"{name}.", depth + 1)
        else:
            out[name] = value
    return out


def _is_stats(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    flat = _flatten(obj)
    return "allocated_bytes.all.current" in flat or "reserved_bytes.all.current" in flat


def _stats_entries(payload: Any) -> Iterator[tuple[str, int | None, dict[str, Any]]]:
    """(label, device, stats) for a dump, a list of dumps (steps) or a dict of them."""
    if _is_stats(payload):
        yield "", None, _flatten(payload)
    elif isinstance(payload, list):
        for index, item in enumerate(payload[:100_000]):
            if _is_stats(item):
                flat = _flatten(item)
                label = str(flat.get("step", flat.get("iteration", index)))
                yield label, None, flat
    elif isinstance(payload, dict):
        for key, item in list(payload.items())[:100_000]:
            if _is_stats(item):
                device = _DEVICE_KEY.match(str(key))
                yield str(key), int(device["n"]) if device else None, _flatten(item)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _stats_dump(
    path: str, stats: dict[str, Any], label: str, device: int | None, rank: int | None
) -> MemoryDump:
    allocated = _int(stats.get("allocated_bytes.all.current"))
    reserved = _int(stats.get("reserved_bytes.all.current"))
    return MemoryDump(
        path=path,
        format="memory_stats",
        label=label,
        rank=rank,
        device=device,
        allocated=allocated,
        reserved=reserved,
        active=_int(stats.get("active_bytes.all.current")),
        inactive=reserved - allocated if reserved is not None and allocated is not None else None,
        inactive_split=_int(stats.get("inactive_split_bytes.all.current")),
        peak_allocated=_int(stats.get("allocated_bytes.all.peak")),
        peak_reserved=_int(stats.get("reserved_bytes.all.peak")),
        segments=_int(stats.get("segment.all.current")),
        num_ooms=_int(stats.get("num_ooms")),
        num_alloc_retries=_int(stats.get("num_alloc_retries")),
    )


# --- snapshots ---------------------------------------------------------------------------


def _frames(raw: Any) -> list[Frame]:
    """Snapshot frames ({filename, line, name}, innermost first), C++ frames included."""
    return [
        f for item in (raw[:MAX_FRAMES] if isinstance(raw, list) else []) if (f := _frame(item))
    ]


def _frame(item: Any) -> Frame | None:
    if not isinstance(item, dict):
        return None
    line = item.get("line")
    return Frame(
        function=str(item.get("name", "?"))[:200],
        file=str(item.get("filename", "?"))[:400],
        line=line if isinstance(line, int) and not isinstance(line, bool) else None,
    )


class _UserFrames:
    """The user frame of raw snapshot stacks, fast: millions of blocks share a few files."""

    def __init__(self) -> None:
        self.is_user: dict[str, bool] = {}

    def __call__(self, raw: Any) -> Frame | None:
        for item in raw[:MAX_FRAMES] if isinstance(raw, list) else []:
            name = item.get("filename") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            user = self.is_user.get(name)
            if user is None:
                user = self.is_user[name] = user_frame([Frame(function="", file=name)]) is not None
            if user:
                return _frame(item)
        return None


def _block_frames(block: dict[str, Any]) -> Any:
    """`frames` since torch 2.1; torch 2.0 kept them in `history` (newest last)."""
    if "frames" in block:
        return block["frames"]
    history = block.get("history")
    if isinstance(history, list) and history and isinstance(history[-1], dict):
        return history[-1].get("frames")
    return None


def _add_site(
    sites: dict[tuple[str, str, int | None], AllocationSite], frame: Frame | None, size: int
) -> None:
    if frame is None:
        return
    site = sites.get(frame.key())
    if site is None:
        sites[frame.key()] = AllocationSite(frame=frame, bytes=size, count=1)
    else:
        site.bytes += size
        site.count += 1


def _top(sites: dict[tuple[str, str, int | None], AllocationSite]) -> list[AllocationSite]:
    return sorted(sites.values(), key=lambda s: -s.bytes)[:TOP_SITES]


def _snapshot_dumps(path: str, snapshot: dict[str, Any]) -> list[ParsedDump]:
    by_device: dict[int | None, list[dict[str, Any]]] = {}
    for segment in snapshot["segments"][:MAX_SEGMENTS]:
        if isinstance(segment, dict):
            by_device.setdefault(_int(segment.get("device")), []).append(segment)
    traces = snapshot.get("device_traces")
    traces = traces if isinstance(traces, list) else []
    for index, trace in enumerate(traces):  # a device with a trace but no segments left
        if isinstance(trace, list) and trace and index not in by_device:
            by_device[index] = []
    settings = snapshot.get("allocator_settings")
    expandable = settings.get("expandable_segments") if isinstance(settings, dict) else None
    rank = file_origin(path).rank
    budget = [MAX_BLOCKS]
    out = []
    for device, segments in sorted(by_device.items(), key=lambda kv: (kv[0] is None, kv[0])):
        trace = traces[device] if device is not None and 0 <= device < len(traces) else None
        parsed = _device_dump(
            path, device, segments, trace if isinstance(trace, list) else [], budget
        )
        parsed.dump.rank = rank
        parsed.dump.expandable_segments = expandable if isinstance(expandable, bool) else None
        if len(by_device) > 1:
            parsed.dump.label = f"device {device}"
        out.append(parsed)
    return out


def _device_dump(
    path: str,
    device: int | None,
    segments: list[dict[str, Any]],
    trace: list[Any],
    budget: list[int],
) -> ParsedDump:
    reserved = allocated = active = inactive = split = largest = 0
    sites: dict[tuple[str, str, int | None], AllocationSite] = {}
    user_of = _UserFrames()
    for segment in segments:
        reserved += _int(segment.get("total_size")) or 0
        blocks = segment.get("blocks")
        blocks = blocks if isinstance(blocks, list) else []
        free_here = 0
        live_here = False
        for block in blocks[: max(0, budget[0])]:
            budget[0] -= 1
            if not isinstance(block, dict):
                continue
            size = _int(block.get("size")) or 0
            state = block.get("state")
            if state == "active_allocated":
                allocated += size
                active += size
                live_here = True
                _add_site(sites, user_of(_block_frames(block)), size)
            elif state in ("active_pending_free", "active_awaiting_free"):
                active += size
                live_here = True
            else:
                free_here += size
                largest = max(largest, size)
        inactive += free_here
        if live_here:
            split += free_here
    dump = MemoryDump(
        path=path,
        format="snapshot",
        device=device,
        allocated=allocated,
        reserved=reserved,
        active=active,
        inactive=inactive,
        inactive_split=split,
        largest_free_block=largest if segments else None,
        segments=len(segments),
        top_sites=_top(sites),
    )
    _read_trace(dump, trace, user_of)
    return ParsedDump(dump, sites)


def _read_trace(dump: MemoryDump, trace: list[Any], user_of: _UserFrames) -> None:
    """The last OOM of the trace, and whether the memory floor rose across the trace.

    Training repeats: memory rises in forward and falls after the step. The floor of
    each window of the trace is what survives iterations; when the floor of the later
    windows never comes back down to the first one's, something is kept alive.
    """
    events = [e for e in trace[-MAX_TRACE_EVENTS:] if isinstance(e, dict)]
    running = 0
    live: dict[int, tuple[int, int, Any]] = {}
    floors: list[int] = []
    window = max(1, len(events) // TRACE_WINDOWS)
    floor: int | None = None
    allocs = 0
    for index, event in enumerate(events):
        action, size = event.get("action"), _int(event.get("size")) or 0
        if action == "oom":
            dump.oom_requested = size
            dump.oom_device_free = _int(event.get("device_free"))
            dump.oom_frames = _frames(event.get("frames"))
        elif action == "alloc":
            allocs += 1
            running += size
            addr = _int(event.get("addr"))
            if addr is not None:
                live[addr] = (size, index, event.get("frames"))
        elif action == "free_requested":
            running -= size
            addr = _int(event.get("addr"))
            if addr is not None:
                live.pop(addr, None)
        floor = running if floor is None else min(floor, running)
        if (index + 1) % window == 0:
            floors.append(floor)
            floor = None
    if allocs < MIN_TRACE_EVENTS or len(floors) < TRACE_WINDOWS:
        return
    dump.trace_growth = min(floors[TRACE_WINDOWS // 2 :]) - floors[0]
    late: dict[tuple[str, str, int | None], AllocationSite] = {}
    for size, index, raw in live.values():
        if index >= window:
            _add_site(late, user_of(raw), size)
    dump.unfreed_sites = _top(late)


# --- growth across dumps -----------------------------------------------------------------


def _natural(text: str) -> list[Any]:
    """step_9 before step_10."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(text)]


def memory_growth(parsed: list[ParsedDump]) -> Iterator[MemoryGrowth]:
    """Dumps of one (folder, rank, device) in path order, then in file order: a series."""
    series: dict[tuple[str, int | None, int | None, str], list[ParsedDump]] = {}
    for item in sorted(enumerate(parsed), key=lambda pair: (_natural(pair[1].dump.path), pair[0])):
        dump = item[1].dump
        key = (str(Path(dump.path).parent), dump.rank, dump.device, dump.format)
        series.setdefault(key, []).append(item[1])
    for (_, rank, device, _), items in series.items():
        points = [p for p in items if p.dump.allocated is not None]
        if len(points) < 2:
            continue
        values = [p.dump.allocated or 0 for p in points]
        tolerance = max(values) // 100
        yield MemoryGrowth(
            rank=rank,
            device=device,
            points=[
                GrowthPoint(
                    label=f"{Path(p.dump.path).name}{' ' + p.dump.label if p.dump.label else ''}",
                    allocated=p.dump.allocated,
                    reserved=p.dump.reserved,
                )
                for p in points
            ][:200],
            growth=values[-1] - values[0],
            monotonic=all(b >= a - tolerance for a, b in zip(values, values[1:], strict=False)),
            growing_sites=_growing_sites(points[0], points[-1]),
            paths=sorted({p.dump.path for p in points})[:50],
        )


def _growing_sites(first: ParsedDump, last: ParsedDump) -> list[AllocationSite]:
    grown = []
    for key, site in last.sites.items():
        before = first.sites.get(key)
        delta = site.bytes - (before.bytes if before else 0)
        if delta > 0:
            grown.append(AllocationSite(frame=site.frame, bytes=delta, count=site.count))
    return sorted(grown, key=lambda s: -s.bytes)[:TOP_SITES]
