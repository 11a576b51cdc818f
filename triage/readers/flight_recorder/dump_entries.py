"""Reduce a dump's entries (any format version, JSON or pickle) into a RankDump: each entry
parsed into an Entry, streamed oldest first into per-group tracks, the user-code frame of
the kept ones, the groups' members and pg_status from the header, and the rank the dump
belongs to (its own word, its groups' members, or its file name)."""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from triage.readers.flight_recorder.dump_records import (
    P2P_KEEP,
    RECENT,
    WINDOW,
    Entry,
    FrameKey,
    GroupKey,
    GroupTrack,
    RankDump,
    Sizes,
    UnreadableDump,
    group_key,
    intern_members,
)
from triage.readers.stacks import is_user_code

_DUMP_SUFFIXES = (".pickle", ".pkl", ".json", ".bin", ".txt", ".dump", ".pt")
_NAME_RANK = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_TRAILING = re.compile(r"(\d+)$")
_P2P_NAME = re.compile(r"^(send|recv)\s+(\d+)\s*(?:->|<-)\s*(\d+|\?)")


def file_name(path: str) -> str:
    """`Path(path).name` without a Path per file (thousands of dumps)."""
    name = os.path.basename(path)
    return name if name not in ("", ".") else Path(path).name  # 'dir/', 'dir/.': 'dir'


def rank_from_name(path: str) -> int | None:
    """`nccl_trace_rank_12`, `host-07_rank3.pickle`, `node4-12`: the rank the name ends with."""
    name = file_name(path)
    lowered = name.lower()
    while lowered.endswith(_DUMP_SUFFIXES):
        cut = next(s for s in _DUMP_SUFFIXES if lowered.endswith(s))
        name, lowered = name[: -len(cut)], lowered[: -len(cut)]
    named = _NAME_RANK.findall(name)
    if named:
        return int(named[-1])
    trailing = _TRAILING.search(name)
    return int(trailing.group(1)) if trailing else None


def _int(value: Any, default: int = 0) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


_INTS = frozenset({int})
_STRS = frozenset({str})


def _sizes(value: Any) -> Sizes:
    """[[1024, 1024]] -> ((1024, 1024),); anything but lists of ints becomes ()."""
    if type(value) is not list:
        return ()
    if len(value) == 1 and type(value[0]) is list:  # one tensor: most ops
        shape = tuple(value[0][:16])
        return (shape,) if _INTS.issuperset(map(type, shape)) else ((),)
    out = []
    for dims in value[:64]:
        if type(dims) is list:
            shape = tuple(dims[:16])
            if _INTS.issuperset(map(type, shape)):  # every one an int (bools are not)
                out.append(shape)
                continue
        out.append(())
    return tuple(out)


def _strings(value: Any) -> tuple[str, ...]:
    if type(value) is list:
        if len(value) == 1 and type(value[0]) is str:  # one tensor: most ops
            return (value[0],)
        if _STRS.issuperset(map(type, value[:64])):
            return tuple(value[:64])
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value[:64]) if isinstance(value, list) else ()


_USER_FILES: dict[str, bool] = {}


def _is_user_file(filename: str) -> bool:
    """is_user_code for a Python file, once per file name: stacks repeat a few files."""
    known = _USER_FILES.get(filename)
    if known is None:
        if len(_USER_FILES) > 65536:
            _USER_FILES.clear()
        known = _USER_FILES[filename] = filename.endswith(".py") and is_user_code(filename)
    return known


def _user_frame(frames: Any) -> tuple[FrameKey | None, bool]:
    """The innermost user-code frame of a recorded stack, and whether the stack was whole."""
    if not isinstance(frames, list):
        return None, False
    whole = True
    user_files = _USER_FILES
    for item in frames[:128]:
        if not isinstance(item, dict):
            whole = False  # a frame recorded before the part of the dump that was read
            continue
        filename = item.get("filename")
        if type(filename) is not str:
            continue
        user = user_files.get(filename)
        if user is None:
            user = _is_user_file(filename)
        if user:
            if not whole:
                return None, False
            line = item.get("line")
            return (
                str(item.get("name", "?"))[:200],
                filename[:400],
                line if isinstance(line, int) and not isinstance(line, bool) else None,
            ), True
    return None, whole


_OPS: dict[str, tuple[str, int | None]] = {}


def _op(profiling: Any) -> tuple[str, int | None]:
    """'nccl:all_reduce' -> ('all_reduce', None); 'nccl:send 0->1' -> ('send', 1)."""
    op_text = (profiling if type(profiling) is str else str(profiling or "")).rpartition(":")[2]
    if " " not in op_text and op_text:
        return op_text, None
    p2p_match = _P2P_NAME.match(op_text.strip())  # 'send 0->1', 'recv 1<-0', 'recv 3<-?'
    if p2p_match:
        return p2p_match.group(1), None if p2p_match.group(3) == "?" else int(p2p_match.group(3))
    return op_text.strip().split(" ", 1)[0] or "unknown", None


def _entry(raw: Any) -> Entry | None:
    """An entry dict (any format version) as an Entry; None when it is not one. Every rank
    repeats a few profiling names: each is parsed once."""
    if type(raw) is not dict:
        return None
    get = raw.get
    group = get("process_group")
    if type(group) in (tuple, list) and group:
        name, desc = str(group[0]), str(group[1]) if len(group) > 1 else ""
    else:
        name, desc = str(get("pg_id", "0")), ""
    profiling = get("profiling_name")
    parsed = _OPS.get(profiling) if type(profiling) is str else None
    if parsed is None:
        parsed = _op(profiling)
        if type(profiling) is str:
            if len(_OPS) > 4096:
                _OPS.clear()
            _OPS[profiling] = parsed
    op, peer = parsed
    is_p2p = get("is_p2p")
    p2p = is_p2p if type(is_p2p) is bool else op in ("send", "recv")
    seq = get("p2p_seq_id" if p2p else "collective_seq_id", get("seq_id"))
    state = get("state")
    if state not in ("scheduled", "started", "completed"):
        completed = get("time_discovered_completed_ns")
        started = get("time_discovered_started_ns")
        state = "completed" if completed else "started" if started else "scheduled"
    pg_id = get("pg_id")
    record = get("record_id")
    return Entry(
        record if type(record) is int else _int(record, -1),
        name,
        desc,
        None if pg_id is None else pg_id if type(pg_id) is int else _int(pg_id),
        seq if type(seq) is int else _int(seq, -1),
        p2p,
        op,
        peer,
        _sizes(get("input_sizes")),
        _sizes(get("output_sizes")),
        _strings(get("input_dtypes")),
        _strings(get("output_dtypes")),
        state,
        state == "completed" or get("retired") is True,
    )


def _reduce(
    path: str, header: Mapping[str, Any], entries: Iterable[Any], total: int, *, fast: bool
) -> RankDump:
    """Stream the entries (oldest first) into per-group tracks; keep frames of kept ones."""
    configs = _configs(header.get("pg_config"))
    status = _status(header.get("pg_status"))
    groups: dict[GroupKey, GroupTrack] = {}
    keys: dict[str, GroupKey] = {}  # group name -> key, for this dump's config
    frames: dict[int, Any] = {}
    blocked: Entry | None = None
    last: Entry | None = None
    first_record: int | None = None
    backend = ""
    for raw in entries:
        entry = _entry(raw)
        if entry is None or entry.seq < 0:
            continue
        if first_record is None:
            first_record = entry.record
            backend = str(raw.get("profiling_name", "")).rpartition(":")[0]
        frames[entry.record] = raw.get("frames")
        key = keys.get(entry.group)
        if key is None:
            key = keys[entry.group] = group_key(entry.group, configs.get(entry.group))
        track = groups.get(key)
        if track is None:
            track = groups[key] = GroupTrack(entry.group, entry.desc)
        if entry.p2p:
            if not entry.done and len(track.p2p_pending) < P2P_KEEP:
                track.p2p_pending.append(entry)
        elif track.first_pending is None:
            track.last = entry
            if entry.done:
                track.recent.append(entry)
            else:
                track.first_pending = entry
                track.window.append(entry)
        else:
            track.last = entry
            if len(track.window) < WINDOW:
                track.window.append(entry)
        if blocked is None and not entry.done:
            blocked = entry
        last = entry
        if not fast and len(frames) > 4 * (RECENT + WINDOW + P2P_KEEP) * max(1, len(groups)):
            frames = _kept_frames(groups, blocked, last, frames)
    for track in groups.values():
        pg_id = next((e.pg_id for e in track.entries() if e.pg_id is not None), None)
        if pg_id is not None and pg_id in status:
            track.status = status[pg_id]
    dump = RankDump(
        path=path,
        rank=-1,
        rank_from="name",
        name_rank=rank_from_name(path),
        version=str(header.get("version", "")),
        backend=backend,
        groups=groups,
        configs=configs,
        blocked=blocked,
        last=last,
        first_record=first_record,
        entries=total,
        fast=fast,
        least_world=_unnamed_size(header.get("pg_config")),
    )
    for entry in dump.all_entries():
        entry.frame, entry.frames_read = _user_frame(frames.get(entry.record))
    _resolve_rank(dump, header)
    return dump


def _kept_frames(
    groups: Mapping[GroupKey, GroupTrack],
    blocked: Entry | None,
    last: Entry | None,
    frames: dict[int, Any],
) -> dict[int, Any]:
    """Forget the stacks of entries no summary holds any more: memory stays bounded."""
    keep = {e.record for t in groups.values() for e in t.entries()}
    keep |= {e.record for e in (blocked, last) if e is not None}
    return {k: v for k, v in frames.items() if k in keep}


def _configs(raw: Any) -> dict[str, tuple[int, ...]]:
    """Group name -> global ranks. gloo writes one unnamed item holding group-local ranks
    of the last group it created: useless for membership, so unnamed items are dropped."""
    out: dict[str, tuple[int, ...]] = {}
    if not isinstance(raw, dict):
        return out
    for key, info in list(raw.items())[:100_000]:
        if not isinstance(info, dict):
            continue
        name = str(info.get("name", key))
        ranks = info.get("ranks")
        if not name or name != str(key):
            continue
        members = _rank_list(ranks)
        if members:
            out[name] = members
    return out


def _unnamed_size(raw: Any) -> int:
    """How many ranks gloo's unnamed pg_config item lists: a lower bound of the world's size
    (its ranks are group-local, of the last group made), where no dump's rank shows it."""
    if not isinstance(raw, dict):
        return 0
    sizes = [
        len(_rank_list(info.get("ranks")))
        for key, info in list(raw.items())[:100_000]
        if isinstance(info, dict) and not str(info.get("name", key))
    ]
    return max(sizes, default=0)


_MEMBERS: dict[str, tuple[int, ...]] = {}


def _rank_list(value: Any) -> tuple[int, ...]:
    """Global ranks of a group. Every dump repeats the same strings ('[0, 1, ..., 4095]'):
    each is parsed once and its tuple shared, or 4,096 dumps hold 4,096 copies each."""
    if isinstance(value, list):
        return intern_members(tuple(sorted({_int(v, -1) for v in value} - {-1})))
    if not isinstance(value, str) or len(value) > 8_000_000:
        return ()
    members = _MEMBERS.get(value)
    if members is None:
        if len(_MEMBERS) > 4096:
            _MEMBERS.clear()
        members = _MEMBERS[value] = intern_members(
            tuple(sorted({int(v) for v in re.findall(r"\d+", value)}))
        )
    return members


def _status(raw: Any) -> dict[int, tuple[int, int, int]]:
    out: dict[int, tuple[int, int, int]] = {}
    if not isinstance(raw, dict):
        return out
    for key, info in list(raw.items())[:100_000]:
        if isinstance(info, dict):
            out[_int(key, -1)] = (
                _int(info.get("last_enqueued_collective"), 0),
                _int(info.get("last_started_collective"), -1),
                _int(info.get("last_completed_collective"), -1),
            )
    return out


def _member(members: tuple[int, ...], rank: int) -> bool:
    """`rank in members` for a sorted tuple, without a scan of thousands of ranks."""
    at = bisect.bisect_left(members, rank)
    return at < len(members) and members[at] == rank


def _resolve_rank(dump: RankDump, header: Mapping[str, Any]) -> None:
    """The dump's own word first (a rank field, or the one rank all its groups share),
    then its file name."""
    explicit = header.get("rank")
    if isinstance(explicit, int) and not isinstance(explicit, bool) and explicit >= 0:
        dump.rank, dump.rank_from = explicit, "dump"
        return
    if len(dump.configs) > 1:
        smallest, *others = sorted(dump.configs.values(), key=len)
        common = [r for r in smallest if all(_member(m, r) for m in others)]
        if len(common) == 1:
            dump.rank, dump.rank_from = common[0], "groups"
            return
    if dump.name_rank is None:
        raise UnreadableDump("no rank in the dump or its file name")
    dump.rank, dump.rank_from = dump.name_rank, "name"
