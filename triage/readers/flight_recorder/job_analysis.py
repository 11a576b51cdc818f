"""A job's dump files, read and aligned: the whole reader for callers, and the user-code
line of the entries a report names (the few files the fast path left unresolved are
re-read whole for them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from triage.readers.flight_recorder.alignment import Analysis, Side, analyze_dumps
from triage.readers.flight_recorder.dump_bytes import MAX_DUMP_BYTES
from triage.readers.flight_recorder.dump_entries import _int, _user_frame, rank_from_name
from triage.readers.flight_recorder.dump_files import read_all, unreadable_files
from triage.readers.flight_recorder.dump_records import RankDump
from triage.readers.safe_pickle import UntrustedPickleError, load_untrusted


@dataclass
class JobDumps:
    """A job's dump files, read and aligned."""

    unreadable: list[tuple[str, str]]  # (file, why): cut off, refused, or named like a dump
    analysis: Analysis | None  # None when no dump could be read


def analyze_files(paths: Sequence[str]) -> JobDumps:
    """Read the files (dumps are told from other documents by their content) and align the
    dumps read, counting the ranks of unreadable files as such; then find the user line of
    the entries the report names."""
    result = read_all(paths)
    unreadable = unreadable_files(result)
    if not result.dumps:
        return JobDumps(unreadable, None)
    unreadable_ranks = [r for p, _ in unreadable if (r := rank_from_name(p)) is not None]
    analysis = analyze_dumps(result.dumps, unreadable_ranks)
    locate(analysis.dumps, wanted_frames(analysis))
    return JobDumps(unreadable, analysis)


def locate(dumps: Mapping[int, RankDump], wanted: Iterable[tuple[int, int]]) -> None:
    """Fill the user frame of (rank, record) entries whose stacks the fast path left
    unresolved, re-reading those few files whole."""
    by_rank: dict[int, set[int]] = {}
    for rank, record in wanted:
        dump = dumps.get(rank)
        if dump is None or not dump.fast:
            continue
        entries = {e.record: e for e in dump.all_entries()}
        if record in entries and not entries[record].frames_read:
            by_rank.setdefault(rank, set()).add(record)
    for rank, records in by_rank.items():
        dump = dumps[rank]
        try:
            document = load_untrusted(Path(dump.path), MAX_DUMP_BYTES)
        except (UntrustedPickleError, OSError):
            continue
        raw = document.get("entries") if isinstance(document, dict) else None
        stacks = {
            _int(e.get("record_id"), -1): e.get("frames")
            for e in (raw if isinstance(raw, list) else [])
            if isinstance(e, dict) and _int(e.get("record_id"), -1) in records
        }
        for entry in dump.all_entries():
            if entry.record in stacks:
                entry.frame, entry.frames_read = _user_frame(stacks[entry.record])


def wanted_frames(analysis: Analysis) -> list[tuple[int, int]]:
    """(rank, record) of the entries the report shows: one per side and p2p wait."""
    out: list[tuple[int, int]] = []
    for point in analysis.stuck:
        for side in point.sides:
            if side.entry is not None and side.ranks:
                owner = _owner(analysis, side)
                if owner is not None:
                    out.append((owner, side.entry.record))
    for wait in analysis.p2p:
        out += [(r, e.record) for r, e in wait.entries.items()]
    return out


def _owner(analysis: Analysis, side: Side) -> int | None:
    """The rank whose dump holds the side's representative entry."""
    for rank in side.ranks:
        dump = analysis.dumps.get(rank)
        if dump is not None and any(e is side.entry for e in dump.all_entries()):
            return rank
    return None
