"""Flight Recorder dumps: read every rank's safely and fast, and align them per process group.

torch's Flight Recorder keeps each rank's last N collectives (op, process group, sequence
number, sizes, dtypes, state, the Python stack that called it). Dumped per rank, the
dumps show which collective every rank reached, including ranks on other hosts and
ranks whose Python stack cannot be read. torch's own analyzer (`fr_trace`) unpickles the
files with `pickle.load`, needs every rank's file, crashes on gloo dumps and holds every
entry of every rank; at a few thousand ranks it takes minutes.

Here each rank's dump is reduced, as it is read, to a compact summary per process group:
the last collective it enqueued, its first unfinished one with a short window after it,
a few finished ones before it, and its pending point-to-point ops. Then the dump is
dropped. The summaries are aligned per group by sequence number: the stuck point is the
oldest unfinished collective of the group, and at that point every member either
entered it (with some op, sizes and dtypes), never enqueued it (idle, or blocked in
another group's op), or left no dump. Stuck points that only wait on another group's
stuck point are victims; the rest, and point-to-point waits that no peer matches, are
what the rules turn into findings. Ranks in identical states are grouped, so evidence
stays a few items for 4,096 ranks as for 4.

Reading is linear in total entries and memory is bounded by the summaries; thousands of
files are read on every core. Pickles go through the restricted unpickler only. Torch's
own pickles (protocol 2, memoized strings and frames) take a fast path: the file is read
at its head and its tail, the header and first entries are unpickled as a prefix, and
only the entries near the rank's frontier (how far back pg_status says) are unpickled,
with the prefix's memo for their references. Anything else goes through the general
path, which reads and unpickles the whole file. The fast path never runs what it does
not read: a dump tampered with in its middle is read like any other, and nothing in it
executes. Stacks recorded between the prefix and the frontier stay unresolved; the few
ranks a report names are re-read whole for their user-code line.
"""

from __future__ import annotations

import bisect
import io
import json
import os
import pickle
import re
import struct
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.models import Location
from triage.observations import FROp, FROverview, FRP2PWait, FRSide, FRStuckGroup
from triage.readers.safe_pickle import RestrictedUnpickler, UntrustedPickleError, load_untrusted
from triage.readers.stacks import is_user_code
from triage.text import format_ranks

MAX_DUMP_BYTES = 256 << 20
SNIFF_BYTES = 1 << 20  # a dump's first entry, and with it its keys, lies within
HEAD_BYTES = 64 << 10  # read first: the header and the first entries of most dumps
TAIL_BYTES = 64 << 10  # read from the end: the frontier of most dumps
MAX_TAIL_BYTES = 4 << 20  # a tail read further back than this reads the whole file
MARGIN = 4  # entries decoded before a rank's first unfinished one (fast path)
RECENT = 6  # finished collectives kept per group before the first unfinished one
WINDOW = 32  # unfinished collectives kept per group
P2P_KEEP = 8  # unfinished point-to-point ops kept per group
MAX_SIDES = 8  # rank groups kept per stuck point; the rest are counted
MAX_STUCK = 20  # stuck points reported; victims first dropped
PARALLEL_FILES = 64  # files from which reading is spread over processes

#: Collectives whose per-rank buffers legitimately differ (torch's analyzer skips them too).
UNEVEN_INPUT = frozenset(
    {"all_to_all", "all_to_all_single", "all_to_all_v_single", "scatter", "reduce_scatter_v"}
)
UNEVEN_OUTPUT = frozenset(
    {"all_to_all", "all_to_all_single", "all_to_all_v_single", "gather", "all_gather_v"}
)
_DEFAULT_DESC = "default_pg"
_DUMP_SUFFIXES = (".pickle", ".pkl", ".json", ".bin", ".txt", ".dump", ".pt")
_NAME_RANK = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_TRAILING = re.compile(r"(\d+)$")
_P2P_NAME = re.compile(r"^(send|recv)\s+(\d+)\s*(?:->|<-)\s*(\d+|\?)")
_FR_MARKERS = (b"collective_seq_id", b"profiling_name", b"pg_config")


class NotFlightRecorder(Exception):
    """The file is some other dump or document: skipped without a word."""


class UnreadableDump(Exception):
    """A Flight Recorder dump that cannot be read (cut off, corrupt, refused): a gap."""


# --- compact records ---------------------------------------------------------------------

Sizes = tuple[tuple[int, ...], ...]
FrameKey = tuple[str, str, int | None]
GroupKey = tuple[str, int | None]  # group name, digest of its members when the dump lists them


@dataclass(slots=True)
class Entry:
    """One recorded op, reduced to what alignment and the report need."""

    record: int
    group: str
    desc: str
    pg_id: int | None
    seq: int
    p2p: bool
    op: str
    peer: int | None  # group-local rank at the other end of a send/recv
    in_sizes: Sizes
    out_sizes: Sizes
    in_dtypes: tuple[str, ...]
    out_dtypes: tuple[str, ...]
    state: str
    done: bool
    frame: FrameKey | None = None
    frames_read: bool = False

    def signature(self) -> tuple[object, ...]:
        """What must agree across ranks at one sequence number (uneven ops excepted)."""
        return (
            self.op,
            None if self.op in UNEVEN_INPUT else self.in_sizes,
            None if self.op in UNEVEN_OUTPUT else self.out_sizes,
            None if self.op in ("scatter", "broadcast") else self.in_dtypes,
            None if self.op == "gather" else self.out_dtypes,
        )

    def describe(self) -> str:
        sizes = ",".join("x".join(map(str, s)) or "scalar" for s in self.in_sizes)
        dtypes = ",".join(sorted(set(self.in_dtypes)))
        shape = f" [{sizes}{' ' + dtypes if dtypes else ''}]" if sizes else ""
        counter = "p2p seq" if self.p2p else "seq"
        state = "finished" if self.done else "pending" if self.state == "scheduled" else self.state
        return f"{self.op}{shape} {counter} {self.seq} ({state})"


@dataclass
class GroupTrack:
    """One rank's view of one process group: where it stands, and the entries that show it."""

    name: str
    desc: str
    last: Entry | None = None
    first_pending: Entry | None = None
    recent: deque[Entry] = field(default_factory=lambda: deque(maxlen=RECENT))
    window: list[Entry] = field(default_factory=list)
    p2p_pending: list[Entry] = field(default_factory=list)
    status: tuple[int, int, int] | None = None  # pg_status: enqueued, started, completed

    @property
    def last_enqueued(self) -> int:
        if self.last is not None:
            return self.last.seq
        return self.status[0] if self.status else 0

    @property
    def last_done(self) -> int:
        return self.first_pending.seq - 1 if self.first_pending else self.last_enqueued

    def at(self, seq: int) -> list[Entry]:
        """This rank's entries of collective `seq` (coalesced ops share one)."""
        found = [e for e in (*self.recent, *self.window) if e.seq == seq]
        if not found and self.last is not None and self.last.seq == seq:
            found = [self.last]
        return found

    def entries(self) -> Iterator[Entry]:
        seen: set[int] = set()
        for entry in (
            *self.recent,
            *self.window,
            *self.p2p_pending,
            *(e for e in (self.last, self.first_pending) if e),
        ):
            if entry.record not in seen:
                seen.add(entry.record)
                yield entry


@dataclass
class RankDump:
    """Everything kept of one rank's dump once the file is dropped."""

    path: str
    rank: int
    rank_from: str  # 'dump' (a rank field), 'groups' (its groups' members), 'name'
    name_rank: int | None
    version: str
    backend: str
    groups: dict[GroupKey, GroupTrack]
    configs: dict[str, tuple[int, ...]]  # group name -> global ranks, when the dump says
    blocked: Entry | None  # oldest unfinished op: where the rank waits
    last: Entry | None  # newest op
    first_record: int | None
    entries: int
    fast: bool

    def key_of(self, entry: Entry) -> GroupKey:
        return group_key(entry.group, self.configs.get(entry.group))

    def all_entries(self) -> Iterator[Entry]:
        seen: set[int] = set()
        for track in self.groups.values():
            for entry in track.entries():
                if entry.record not in seen:
                    seen.add(entry.record)
                    yield entry
        for extra in (self.blocked, self.last):
            if extra is not None and extra.record not in seen:
                seen.add(extra.record)
                yield extra


# --- reading -----------------------------------------------------------------------------


def rank_from_name(path: str) -> int | None:
    """`nccl_trace_rank_12`, `host-07_rank3.pickle`, `node4-12`: the rank the name ends with."""
    name = Path(path).name
    lowered = name.lower()
    while lowered.endswith(_DUMP_SUFFIXES):
        cut = next(s for s in _DUMP_SUFFIXES if lowered.endswith(s))
        name, lowered = name[: -len(cut)], lowered[: -len(cut)]
    named = _NAME_RANK.findall(name)
    if named:
        return int(named[-1])
    trailing = _TRAILING.search(name)
    return int(trailing.group(1)) if trailing else None


def looks_like_dump(head: bytes) -> bool:
    """A document whose first bytes carry Flight Recorder keys (its first entry has them)."""
    return any(marker in head for marker in _FR_MARKERS)


def read_dump(path: str | Path) -> RankDump:
    """Reduce one rank's dump file; NotFlightRecorder or UnreadableDump when it is not one.
    Other documents are told apart by their head and never read whole; a dump torch
    wrote is mostly read at its head and its tail only."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(size if size <= HEAD_BYTES + TAIL_BYTES else HEAD_BYTES)
    if not looks_like_dump(head):
        raise NotFlightRecorder
    if size > MAX_DUMP_BYTES:
        raise UnreadableDump(f"over the {MAX_DUMP_BYTES}-byte limit for dumps: not read")
    return parse_dump(str(path), _Bytes(str(path), head, size))


def parse_dump(path: str, data: bytes | _Bytes) -> RankDump:
    """Reduce one rank's dump from its bytes (pickle or JSON)."""
    view = data if isinstance(data, _Bytes) else _Bytes(None, data, len(data))
    if not looks_like_dump(view.head[:SNIFF_BYTES]):
        raise NotFlightRecorder
    if view[:1] == b"\x80":
        fast = _fast_pickle(view)
        if fast is not None:
            header, entries, total = fast
            return _reduce(path, header, entries, total, fast=True)
        try:
            document = load_untrusted(view.whole(), MAX_DUMP_BYTES)
        except UntrustedPickleError as exc:
            raise UnreadableDump(exc.reason) from None
    else:
        try:
            document = json.loads(view.whole().decode("utf-8", "replace"))
        except RecursionError:
            raise UnreadableDump("corrupt JSON: nested too deeply") from None
        except ValueError as exc:
            raise UnreadableDump(f"corrupt JSON: {exc}") from None
    if not isinstance(document, dict) or not (
        isinstance(document.get("entries"), list) or "pg_config" in document
    ):
        raise NotFlightRecorder
    raw = document.get("entries")
    entries = raw if isinstance(raw, list) else []
    return _reduce(path, document, entries, len(entries), fast=False)


class _Bytes:
    """A dump's bytes, read lazily. The fast path needs the head of the file (header and
    first entries) and its tail (the frontier); a search or slice that leaves them reads
    the whole file once. Matches are what `bytes` would return on the whole file: a
    forward search that finds nothing in the head, or a backward one that finds nothing
    in the tail, goes on over everything."""

    def __init__(self, path: str | None, head: bytes, size: int) -> None:
        self.path = path
        self.head = head
        self.size = size
        self.tail = b""
        self.tail_at = size
        self.complete = len(head) >= size

    def __len__(self) -> int:
        return self.size

    def whole(self) -> bytes:
        if not self.complete:
            assert self.path is not None  # a view without a file is complete
            with open(self.path, "rb") as handle:
                data = handle.read(MAX_DUMP_BYTES + 1)
            if len(data) > MAX_DUMP_BYTES:
                raise UnreadableDump(f"over the {MAX_DUMP_BYTES}-byte limit for dumps: grew")
            self.head, self.size, self.tail, self.tail_at = data, len(data), b"", len(data)
            self.complete = True
        return self.head

    def _tail_from(self, start: int) -> bool:
        """Make the tail hold [start, size) if it is a tail's worth; False when it is not."""
        if start >= self.tail_at:
            return True
        begin = min(start, self.size - TAIL_BYTES)
        if self.complete or begin <= len(self.head) or self.size - begin > MAX_TAIL_BYTES:
            return False
        assert self.path is not None
        with open(self.path, "rb") as handle:
            handle.seek(begin)
            tail = handle.read(self.size - begin)
        if len(tail) != self.size - begin:  # the file changed under us: read it whole
            return False
        self.tail, self.tail_at = tail, begin
        return True

    def _holding(self, start: int, end: int) -> tuple[bytes, int]:
        """A buffer and its file offset that hold [start, end)."""
        if self.complete or end <= len(self.head):
            return self.head, 0
        if self._tail_from(start):
            return self.tail, self.tail_at
        return self.whole(), 0

    def __getitem__(self, key: slice) -> bytes:
        start, end, _ = key.indices(self.size)
        if end <= start:
            return b""
        buffer, offset = self._holding(start, end)
        return buffer[start - offset : end - offset]

    def byte(self, at: int) -> int:
        return self[at : at + 1][0] if at < self.size else -1

    def startswith(self, prefix: bytes) -> bool:
        return self[: len(prefix)] == prefix

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        end = self.size if end is None else min(end, self.size)
        if end - start < len(sub):
            return -1
        if not self.complete and start < len(self.head):
            found = self.head.find(sub, start, min(end, len(self.head)))
            if found >= 0 or end <= len(self.head):
                return found
        buffer, offset = self._holding(start, end)
        found = buffer.find(sub, max(0, start - offset), end - offset)
        return found + offset if found >= 0 else -1

    def rfind(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        end = self.size if end is None else min(end, self.size)
        if end - start < len(sub):
            return -1
        if (
            not self.complete
            and end > len(self.head)
            and self._tail_from(self.size - TAIL_BYTES)
            and end > self.tail_at
        ):
            found = self.tail.rfind(sub, max(0, start - self.tail_at), end - self.tail_at)
            if found >= 0 or start >= self.tail_at:
                return found + self.tail_at if found >= 0 else -1
        buffer, offset = self._holding(start, end)
        found = buffer.rfind(sub, max(0, start - offset), end - offset)
        return found + offset if found >= 0 else -1

    def count(self, sub: bytes, start: int, end: int) -> int:
        end = min(end, self.size)
        if end - start < len(sub):
            return 0
        buffer, offset = self._holding(start, end)
        return buffer.count(sub, start - offset, end - offset)


def _int(value: Any, default: int = 0) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def _sizes(value: Any) -> Sizes:
    """[[1024, 1024]] -> ((1024, 1024),); anything but lists of ints becomes ()."""
    if type(value) is not list:
        return ()
    out = []
    for dims in value[:64]:
        if type(dims) is list:
            shape = tuple(dims[:16])
            if all(type(d) is int for d in shape):
                out.append(shape)
                continue
        out.append(())
    return tuple(out)


def _strings(value: Any) -> tuple[str, ...]:
    if type(value) is list and all(type(v) is str for v in value[:64]):
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
    for item in frames[:128]:
        if not isinstance(item, dict):
            whole = False  # a frame recorded before the part of the dump that was read
            continue
        filename = item.get("filename")
        if type(filename) is str and _is_user_file(filename):
            if not whole:
                return None, False
            line = item.get("line")
            return (
                str(item.get("name", "?"))[:200],
                filename[:400],
                line if isinstance(line, int) and not isinstance(line, bool) else None,
            ), True
    return None, whole


def _entry(raw: Any) -> Entry | None:
    """An entry dict (any format version) as an Entry; None when it is not one."""
    if type(raw) is not dict:
        return None
    get = raw.get
    group = get("process_group")
    if type(group) in (tuple, list) and group:
        name, desc = str(group[0]), str(group[1]) if len(group) > 1 else ""
    else:
        name, desc = str(get("pg_id", "0")), ""
    profiling = get("profiling_name")
    op_text = (profiling if type(profiling) is str else str(profiling or "")).rpartition(":")[2]
    op, peer = op_text, None
    if " " in op_text or not op_text:  # 'send 0->1', 'recv 1<-0', 'recv 3<-?'
        p2p_match = _P2P_NAME.match(op_text.strip())
        if p2p_match:
            op = p2p_match.group(1)
            peer = None if p2p_match.group(3) == "?" else int(p2p_match.group(3))
        else:
            op = op_text.strip().split(" ", 1)[0] or "unknown"
    is_p2p = get("is_p2p")
    p2p = is_p2p if type(is_p2p) is bool else op in ("send", "recv")
    seq = _int(get("p2p_seq_id" if p2p else "collective_seq_id", get("seq_id")), -1)
    state = get("state")
    if state not in ("scheduled", "started", "completed"):
        completed = get("time_discovered_completed_ns")
        started = get("time_discovered_started_ns")
        state = "completed" if completed else "started" if started else "scheduled"
    pg_id = get("pg_id")
    return Entry(
        record=_int(get("record_id"), -1),
        group=name,
        desc=desc,
        pg_id=None if pg_id is None else _int(pg_id),
        seq=seq,
        p2p=p2p,
        op=op,
        peer=peer,
        in_sizes=_sizes(get("input_sizes")),
        out_sizes=_sizes(get("output_sizes")),
        in_dtypes=_strings(get("input_dtypes")),
        out_dtypes=_strings(get("output_dtypes")),
        state=state,
        done=state == "completed" or get("retired") is True,
    )


def _reduce(
    path: str, header: Mapping[str, Any], entries: Iterable[Any], total: int, *, fast: bool
) -> RankDump:
    """Stream the entries (oldest first) into per-group tracks; keep frames of kept ones."""
    configs = _configs(header.get("pg_config"))
    status = _status(header.get("pg_status"))
    groups: dict[GroupKey, GroupTrack] = {}
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
        key = group_key(entry.group, configs.get(entry.group))
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


_INTERNED: dict[tuple[int, ...], tuple[int, ...]] = {}
_DIGESTS: dict[int, tuple[tuple[int, ...], int]] = {}


def group_key(name: str, members: tuple[int, ...] | None) -> GroupKey:
    """Groups are told apart by name and members (split_group reuses names); the members
    enter as a digest, computed once per tuple: hashing 4,096 ranks per lookup is not free."""
    if members is None:
        return (name, None)
    known = _DIGESTS.get(id(members))
    if known is None or known[0] is not members:
        if len(_DIGESTS) > 65536:
            _DIGESTS.clear()
        known = _DIGESTS[id(members)] = (members, hash(members))
    return (name, known[1])


def intern_members(members: tuple[int, ...]) -> tuple[int, ...]:
    """One tuple object per distinct member list."""
    if len(_INTERNED) > 65536:
        _INTERNED.clear()
    return _INTERNED.setdefault(members, members)


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


@dataclass
class ReadResult:
    """Every file of a folder of dumps, sorted: read, not a dump, or unreadable (why)."""

    dumps: list[RankDump] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    def merge(self, other: ReadResult) -> None:
        """Take another process's results; its member lists become this process's shared
        tuples again (each batch pickled its own copy)."""
        local: dict[int, tuple[int, ...]] = {}  # a batch shares one tuple per member list
        for dump in other.dumps:
            dump.configs = {
                name: local.get(id(m)) or local.setdefault(id(m), intern_members(m))
                for name, m in dump.configs.items()
            }
        self.dumps += other.dumps
        self.skipped += other.skipped
        self.unreadable += other.unreadable


def read_files(paths: Sequence[str]) -> ReadResult:
    """Read dumps one after another; each is dropped once reduced."""
    result = ReadResult()
    for path in paths:
        try:
            result.dumps.append(read_dump(path))
        except NotFlightRecorder:
            result.skipped.append(path)
        except UnreadableDump as exc:
            result.unreadable.append((path, str(exc)))
        except OSError as exc:
            result.unreadable.append((path, f"cannot read: {exc.strerror or exc}"))
        except Exception as exc:  # crafted content must cost its file, not the analysis
            reason = f"unexpected content ({type(exc).__name__}: {exc})"
            result.unreadable.append((path, reason.splitlines()[0][:300]))
    return result


def read_all(paths: Sequence[str], workers: int | None = None) -> ReadResult:
    """Read many dumps on several cores: each file is independent, and at thousands of
    ranks reading dominates. This process reads one share itself while `workers - 1`
    others read the rest (half the results to ship back than with idle waiting). Falls
    back to one process where a pool cannot start."""
    cores = workers if workers is not None else min(os.cpu_count() or 1, 8)
    if cores < 2 or len(paths) < PARALLEL_FILES:
        return read_files(paths)
    import multiprocessing as mp  # only thousands of dumps pay for a pool
    import threading
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    shares = [list(paths[i::cores]) for i in range(cores)]
    method = (
        "fork"
        if threading.active_count() == 1 and "fork" in mp.get_all_start_methods()
        else "spawn"
    )
    result = ReadResult()
    try:
        with ProcessPoolExecutor(cores - 1, mp_context=mp.get_context(method)) as pool:
            others = pool.map(read_files, shares[1:])
            result.merge(read_files(shares[0]))
            for part in others:
                result.merge(part)
    except (OSError, BrokenProcessPool, RuntimeError):
        return read_files(paths)
    return result


# --- fast path: torch's own pickles ------------------------------------------------------

PREFIX_ENTRIES = 4  # entries unpickled with the header: they define most memoized strings
CHUNK = 8  # entries decoded from the end at first; doubled until the frontier is in
MAX_BACK = 1024  # entries decoded from the end at most; beyond, the general path reads it
_MISSING_MEMO = re.compile(r"Memo value not found at index (\d+)")


def _unpickler(data: bytes) -> RestrictedUnpickler:
    """The restricted unpickler over a buffered stream: with `peek` it reads in blocks,
    with a bare BytesIO it makes a Python call per opcode (twice as slow)."""
    return RestrictedUnpickler(io.BufferedReader(io.BytesIO(data), max(8192, len(data))))


def _ref(index: int) -> bytes:
    return b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)


def _int_op(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    return b"J" + struct.pack("<i", value)


class _Layout:
    """Where a torch-written dump keeps its entries, and the memo their references need.

    Torch's pickler memoizes every string and every frame dict and nothing else, and
    writes each entry as `}(` + key/value pairs + `u`, the first key the same in all.
    After the first entry the key is a memo reference, so `}(` + that reference marks
    where every later entry starts. The header and the first entries are unpickled as a
    prefix; its memo, padded with None for indices defined further on, lets any run of
    later entries be unpickled on its own.
    """

    def __init__(self, data: _Bytes, list_start: int, marker: bytes, prefix_end: int) -> None:
        self.data = data
        self.list_start = list_start
        self.marker = marker
        self.prefix_end = prefix_end
        self.memo: Any = None
        self.memo_size = 0
        self.prefix_memo: Any = None
        self.known = 0
        self.strings: Mapping[int, str] = {}

    def pad(self, size: int, strings: Mapping[int, str] | None = None) -> None:
        """Memo = the prefix's, plus `strings` or None at each index up to `size`."""
        strings = strings or {}
        if strings:
            filler = bytearray()
            for index in range(self.known, size):
                text = strings.get(index)
                if text is None:
                    filler += _filler(index)
                else:
                    raw = text.encode("utf-8")
                    filler += b"X" + struct.pack("<I", len(raw)) + raw + b"r"
                    filler += struct.pack("<I", index) + b"0"
            stream = b"\x80\x02" + bytes(filler) + b"N."
        else:
            stream = _fillers(self.known, size)
        source = _unpickler(stream)
        source.memo = self.prefix_memo
        source.load()
        self.memo, self.memo_size, self.strings = source.memo, max(size, self.known), strings

    def starts_before(self, end: int, count: int) -> list[int]:
        """Start offsets of up to `count` entries before offset `end` (after the prefix)."""
        found: list[int] = []
        while len(found) < count:
            at = self.data.rfind(self.marker, self.prefix_end, end)
            if at < 0:
                break
            found.append(at)
            end = at
        return found[::-1]

    def decode(self, begin: int, end: int | None) -> list[Any]:
        """The entries from offset `begin` to `end` (None: to the end of the list)."""
        data = self.data
        if end is None:
            chunk = b"\x80\x02}(X\x01\x00\x00\x00_](" + data[begin:]
        else:
            chunk = b"\x80\x02](" + data[begin:end] + b"e."
        items: Any = None
        while items is None:
            unpickler = _unpickler(chunk)
            unpickler.memo = self.memo
            try:
                items = unpickler.load()
            except pickle.UnpicklingError as exc:
                missing = _MISSING_MEMO.search(str(exc))
                if missing is None or not self.memo_size <= int(missing[1]) < 4_000_000:
                    raise
                self.pad(int(missing[1]) + 512, self.strings)
        if isinstance(items, dict):
            items = items.get("_")
        expected = data.count(self.marker, begin, len(data) if end is None else end)
        if not isinstance(items, list) or len(items) != expected:
            raise ValueError("entry boundaries are not where the markers say")
        return items


def _filler(index: int) -> bytes:
    return b"Nr" + struct.pack("<I", index) + b"0"


_FILLERS: dict[tuple[int, int], bytes] = {}


def _fillers(start: int, end: int) -> bytes:
    """A pickle that puts None at memo indices start..end-1; dumps of one job share them."""
    key = (start, end)
    stream = _FILLERS.get(key)
    if stream is None:
        if len(_FILLERS) > 1024:
            _FILLERS.clear()
        body = b"".join(_filler(i) for i in range(start, end))
        stream = _FILLERS[key] = b"\x80\x02" + body + b"N."
    return stream


def _fast_pickle(data: _Bytes) -> tuple[dict[str, Any], list[Any], int] | None:
    """Header, the entries that show the rank's frontier (oldest first) and the entry
    count of a dump torch's C++ pickler wrote; None for any other layout."""
    if not data.startswith(b"\x80\x02}("):
        return None
    key = b"X\x07\x00\x00\x00entries"
    at = data.find(key)
    if at < 0:
        return None
    pos = at + len(key)
    if data[pos : pos + 1] == b"q":
        pos += 2
    elif data[pos : pos + 1] == b"r":
        pos += 5
    else:
        return None
    list_start = pos + 2
    first = re.match(rb"\}\(X(....)", data[list_start : list_start + 7], re.DOTALL)
    if data[pos : pos + 2] != b"](" or first is None:
        return None
    length = struct.unpack("<I", first[1])[0]
    put = list_start + 7 + length
    if data[put : put + 1] == b"q":
        marker = b"}(" + _ref(data.byte(put + 1))
    elif data[put : put + 1] == b"r":
        marker = b"}(" + _ref(struct.unpack("<I", data[put + 1 : put + 5])[0])
    else:
        return None
    prefix_end = list_start
    for _ in range(PREFIX_ENTRIES):
        nxt = data.find(marker, prefix_end + 2)
        if nxt < 0:
            return None  # a short dump: the general path reads it whole as fast
        prefix_end = nxt
    layout = _Layout(data, list_start, marker, prefix_end)
    try:
        source = _unpickler(data[:prefix_end] + b"eu.")
        header = source.load()
        if not isinstance(header, dict) or not isinstance(header.get("entries"), list):
            return None
        layout.prefix_memo, layout.known = source.memo, len(source.memo.copy())
        layout.pad(layout.known + 64)
        head_entries = list(header.pop("entries"))
        tail, latest = _decode_frontier(layout, header, head_entries)
        if not _strings_resolved([*tail, *latest]):
            # a string first recorded between the prefix and the frontier: find them all
            strings = _string_defs(data.whole(), layout.prefix_end)
            if strings is None:
                return None
            layout.pad(max(layout.memo_size, max(strings, default=0) + 1), strings)
            tail, latest = _decode_frontier(layout, header, head_entries)
            if not _strings_resolved([*tail, *latest]):
                return None
    except UntrustedPickleError as exc:
        if exc.refused is not None:
            raise UnreadableDump(exc.reason) from None
        return None
    except Exception:  # the layout was not what it seemed: the general path decides
        return None
    if not tail:
        return None
    if _int(tail[0].get("record_id"), -1) > _int(head_entries[-1].get("record_id"), -1) + 1:
        entries = [head_entries[0], *latest, *tail]
    else:
        entries = [*head_entries, *tail]
    merged = {_int(e.get("record_id"), -1): e for e in entries if isinstance(e, dict)}
    records = sorted(merged)
    if not records or records[0] < 0:
        return None
    head = [_int(e.get("record_id"), -1) for e in head_entries]
    back = [_int(e.get("record_id"), -1) for e in tail]
    if head != list(range(head[0], head[0] + len(head))) or back != list(
        range(back[0], back[0] + len(back))
    ):
        return None
    return header, [merged[r] for r in records], back[-1] - head[0] + 1


def _decode_frontier(
    layout: _Layout, header: dict[str, Any], head: list[Any]
) -> tuple[list[Any], list[Any]]:
    tail = _frontier(layout, _status(header.get("pg_status")))
    if tail is None:
        raise ValueError("the frontier lies too far back")
    if tail and _int(tail[0].get("record_id"), -1) > _int(head[-1].get("record_id"), -1) + 1:
        return tail, _latest_per_group(layout, header, head, tail)
    return tail, []


def _strings_resolved(entries: Iterable[Any]) -> bool:
    """Every string an entry needs came out as a string, not a memo placeholder."""
    for entry in entries:
        if type(entry) is not dict:
            return False
        group = entry.get("process_group")
        if not isinstance(group, (tuple, list)) or None in group:
            return False
        if type(entry.get("profiling_name")) is not str or type(entry.get("state")) is not str:
            return False
        if None in (entry.get("input_dtypes") or ()) or None in (entry.get("output_dtypes") or ()):
            return False
    return True


_STRING_DEF = re.compile(rb"X(..)\x00\x00", re.DOTALL)


def _string_defs(data: bytes, start: int) -> dict[int, str] | None:
    """Memo index -> string for every memoized string after `start` (torch memoizes all).

    A string is `X <len> <utf-8> q|r <index>`; candidates inside other strings or integers
    are ruled out by their length, their encoding and the BINPUT that must follow. Two
    strings claiming one index mean the bytes are not what they seem: None.
    """
    out: dict[int, str] = {}
    resume = start
    limit = len(data)
    for match in _STRING_DEF.finditer(data, start):
        begin = match.start()
        if begin < resume:
            continue
        end = begin + 5 + (match[1][0] | match[1][1] << 8)
        if end + 2 > limit:
            continue
        if data[end] == 0x71:  # q
            index = data[end + 1]
        elif data[end] == 0x72 and end + 5 <= limit:  # r
            index = struct.unpack_from("<I", data, end + 1)[0]
        else:
            continue
        try:
            text = data[begin + 5 : end].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if index in out or index > limit:
            return None
        out[index] = text
        resume = end
    return out


def _frontier(layout: _Layout, status: Mapping[int, tuple[int, int, int]]) -> list[Any] | None:
    """The newest entries, back far enough to hold every group's oldest unfinished
    collective (pg_status says which) and a few finished ones before it."""
    need = {
        pg: completed + 1 for pg, (enqueued, _, completed) in status.items() if completed < enqueued
    }
    count = CHUNK
    end: int | None = None
    decoded: list[Any] = []
    while True:
        starts = layout.starts_before(
            len(layout.data) if end is None else end, count - len(decoded)
        )
        if starts:
            decoded = layout.decode(starts[0], end) + decoded
            end = starts[0]
        reached_prefix = not starts or starts[0] <= layout.prefix_end
        if reached_prefix or _covers(decoded, need):
            return decoded
        if count >= MAX_BACK:
            return None
        count *= 2


def _covers(entries: Sequence[Any], need: Mapping[int, int]) -> bool:
    """Every group with unfinished work is decoded back to before its first unfinished
    collective, and MARGIN entries precede the oldest unfinished entry."""
    unfinished = next(
        (i for i, e in enumerate(entries) if isinstance(e, dict) and e.get("retired") is False),
        None,
    )
    if unfinished is not None and unfinished < MARGIN:
        return False
    reached: dict[int, int] = {}
    for entry in entries:
        if isinstance(entry, dict) and not entry.get("is_p2p"):
            pg = _int(entry.get("pg_id"), -1)
            seq = _int(entry.get("collective_seq_id"), -1)
            reached[pg] = min(reached.get(pg, seq), seq)
    return all(pg in reached and reached[pg] < seq for pg, seq in need.items())


def _latest_per_group(
    layout: _Layout, header: Mapping[str, Any], head: Sequence[Any], tail: Sequence[Any]
) -> list[Any]:
    """The newest collective of every group the frontier does not show: its last
    sequence number is what the other ranks' alignment asks about."""
    seen = {_int(e.get("pg_id"), -1) for e in tail if isinstance(e, dict)}
    key_entry = next((e for e in head if isinstance(e, dict) and "pg_id" in e), None)
    pg_key = _key_index(layout, "pg_id")
    if key_entry is None or pg_key is None:
        return []
    found = []
    data = layout.data
    for pg_id, (enqueued, _, _) in _status(header.get("pg_status")).items():
        if pg_id in seen or pg_id < 0 or enqueued <= 0:
            continue
        pattern = _ref(pg_key) + _int_op(pg_id)
        end = len(data)
        for _ in range(16):
            at = data.rfind(pattern, layout.prefix_end, end)
            if at < 0:
                break
            begin = data.rfind(layout.marker, layout.prefix_end, at + 1)
            stop = data.find(layout.marker, at)
            if begin < 0:
                break
            item = layout.decode(begin, None if stop < 0 else stop)[0]
            if isinstance(item, dict) and _int(item.get("pg_id"), -1) == pg_id:
                found.append(item)
                if not item.get("is_p2p"):
                    break
            end = begin
    return found


def _key_index(layout: _Layout, key: str) -> int | None:
    """The memo index of a key string torch defined in the first entry."""
    raw = key.encode()
    at = layout.data.find(b"X" + struct.pack("<I", len(raw)) + raw, layout.list_start)
    if at < 0 or at > layout.prefix_end:
        return None
    put = at + 5 + len(raw)
    if layout.data[put : put + 1] == b"q":
        return layout.data.byte(put + 1)
    if layout.data[put : put + 1] == b"r":
        return int(struct.unpack("<I", layout.data[put + 1 : put + 5])[0])
    return None


# --- locating: the user line of the entries a report names -------------------------------


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


# --- alignment across ranks --------------------------------------------------------------


@dataclass
class GroupInfo:
    """A process group across ranks: global members, and each member's track."""

    key: GroupKey
    name: str
    desc: str
    members: tuple[int, ...]
    membership: str  # 'config' (the dumps list it), 'world' (default group), 'observed'
    tracks: dict[int, GroupTrack] = field(default_factory=dict)


@dataclass
class Side:
    """Ranks of one group in one state at its stuck point."""

    state: str
    ranks: list[int]
    entry: Entry | None = None
    waits_in: str | None = None  # 'group:seq' or 'p2p' of a rank blocked elsewhere
    novel: bool = False  # its op appears nowhere in the group's recent history


@dataclass
class StuckPoint:
    """A group's oldest unfinished collective and where each member stands there;
    `root` is False when its outliers only wait in another stuck point."""

    group: GroupInfo
    seq: int
    sides: list[Side]
    waits_on: list[str] = field(default_factory=list)
    root: bool = True
    dropped_sides: int = 0

    @property
    def key(self) -> str:
        return f"{self.group.name}:{self.seq}"

    def side(self, state: str) -> list[Side]:
        return [s for s in self.sides if s.state == state]


@dataclass
class P2PWait:
    """A chain or cycle of ranks blocked in sends/recvs that no peer matches."""

    ranks: list[int]  # every rank waiting in it
    culprits: list[int]  # the cycle, or the rank at the end of the chain
    cycle: bool
    sink: int | None  # the rank at the end of a chain, when not a cycle
    sink_state: str  # 'no_dump', 'idle', 'collective', 'unknown'
    entries: dict[int, Entry] = field(default_factory=dict)


@dataclass
class Analysis:
    """Every rank's summary, aligned: what the tool turns into evidence."""

    dumps: dict[int, RankDump]
    world: list[int]
    missing: list[int]  # ranks some group needs that left no dump
    groups: list[GroupInfo]
    stuck: list[StuckPoint]
    p2p: list[P2PWait]
    duplicates: list[tuple[str, str]]  # (kept, dropped) files claiming one rank


def analyze_dumps(dumps: Iterable[RankDump], unreadable_ranks: Iterable[int] = ()) -> Analysis:
    """Align the summaries per group; find every group's stuck point and the p2p waits."""
    by_rank: dict[int, RankDump] = {}
    duplicates: list[tuple[str, str]] = []
    for dump in dumps:
        kept = by_rank.get(dump.rank)
        if kept is None:
            by_rank[dump.rank] = dump
            continue
        if _recency(dump) > _recency(kept):
            by_rank[dump.rank] = dump
            duplicates.append((dump.path, kept.path))
        else:
            duplicates.append((kept.path, dump.path))
    unreadable = set(unreadable_ranks)
    groups = _groups(by_rank, unreadable)
    world = sorted({r for g in groups for r in g.members} | set(by_rank))
    missing = sorted(set(world) - set(by_rank) - unreadable)
    stuck = [p for g in groups if (p := _stuck_point(g, by_rank, unreadable)) is not None]
    p2p = _p2p_waits(by_rank, {g.key: g for g in groups})
    _roots(stuck)
    stuck.sort(key=lambda p: (not p.root, -len(p.group.members), p.group.name))
    return Analysis(by_rank, world, missing, groups, stuck[:MAX_STUCK], p2p, duplicates)


def _recency(dump: RankDump) -> tuple[int, int, bool]:
    """Of two dumps of one rank, the later one wins (a rank dumped again, by a probe at each
    snapshot or by hand); then the fuller one; then a pickle (it has stacks) over its JSON twin.
    Record ids grow through a process's life, so the newest entry dates a dump."""
    newest = dump.last.record if dump.last is not None else -1
    return newest, dump.entries, not dump.path.endswith(".json")


def _groups(dumps: Mapping[int, RankDump], unreadable: set[int]) -> list[GroupInfo]:
    """Groups across ranks. Members come from the dumps' group lists when they give them
    (NCCL); else the default group holds every rank up to the highest seen, and a subgroup
    the ranks that recorded ops on it (gloo)."""
    found: dict[GroupKey, GroupInfo] = {}
    for rank, dump in sorted(dumps.items()):
        for key, track in dump.groups.items():
            info = found.get(key)
            if info is None:
                members = dump.configs.get(track.name) if key[1] is not None else None
                info = found[key] = GroupInfo(
                    key, track.name, track.desc, members or (), "config" if members else "observed"
                )
            info.tracks[rank] = track
    distinct = {id(m): m for d in dumps.values() for m in d.configs.values()}
    top = max((m[-1] for m in distinct.values() if m), default=-1)  # members are sorted
    world = tuple(range(max([top, *dumps, *unreadable]) + 1)) if dumps else ()
    for info in found.values():
        if info.membership != "observed":
            continue
        if info.desc == _DEFAULT_DESC or (info.name == "0" and info.desc in ("", "default")):
            info.members, info.membership = world, "world"
        else:
            info.members = tuple(sorted(info.tracks))
    return sorted(found.values(), key=lambda g: (-len(g.members), g.name))


def _stuck_point(
    group: GroupInfo, dumps: Mapping[int, RankDump], unreadable: set[int]
) -> StuckPoint | None:
    """The group's oldest unfinished collective, and where every member stands there."""
    pending = [t.first_pending.seq for t in group.tracks.values() if t.first_pending]
    if not pending:
        return None
    seq = min(pending)
    entered: dict[tuple[object, ...], list[tuple[int, list[Entry]]]] = {}
    buckets: dict[tuple[str, str | None], list[int]] = {}
    reps: dict[tuple[str, str | None], Entry | None] = {}
    for rank in group.members:
        dump = dumps.get(rank)
        if dump is None:
            state = "unreadable" if rank in unreadable else "no_dump"
            buckets.setdefault((state, None), []).append(rank)
            continue
        if group.membership == "config" and dump.configs and group.name not in dump.configs:
            buckets.setdefault(("no_group", None), []).append(rank)
            reps.setdefault(("no_group", None), dump.blocked or dump.last)
            continue
        track = group.tracks.get(rank)
        if track is None and dump.first_record not in (0, None):
            buckets.setdefault(("unknown", None), []).append(rank)
            continue
        if track is None or track.last_enqueued < seq:
            blocked_at = dump.blocked
            if blocked_at is None:
                buckets.setdefault(("idle", None), []).append(rank)
                reps.setdefault(("idle", None), dump.last)
            else:
                label = "p2p" if blocked_at.p2p else f"{blocked_at.group}:{blocked_at.seq}"
                buckets.setdefault(("elsewhere", label), []).append(rank)
                reps.setdefault(("elsewhere", label), blocked_at)
            continue
        at = track.at(seq)
        signature: tuple[object, ...] = tuple(e.signature() for e in at) if at else ("?",)
        entered.setdefault(signature, []).append((rank, at))
    sides: list[Side] = []
    history = {e.op for t in group.tracks.values() for e in t.recent if e.seq < seq}

    def rank_order(
        kv: tuple[tuple[object, ...], list[tuple[int, list[Entry]]]],
    ) -> tuple[int, bool, int]:
        """Most members first; on a tie, an op the group ran before beats a new one."""
        ops = {e.op for _, at in kv[1] for e in at}
        return (-len(kv[1]), not ops <= history, min(r for r, _ in kv[1]))

    if entered:
        ordered = sorted(entered.items(), key=rank_order)
        top_signature, top = ordered[0]
        ops = {sig: tuple(s[0] for s in sig if isinstance(s, tuple)) for sig, _ in ordered}
        sides += _entered_sides(top, "waiting")
        for signature, members in ordered[1:]:
            if signature == ("?",) or top_signature == ("?",):
                kind = "entered"
            else:
                kind = "other_op" if ops[signature] != ops[top_signature] else "other_shape"
            sides += _entered_sides(members, kind)
    for (bucket, waits), ranks in buckets.items():
        sides.append(Side(bucket, ranks, reps.get((bucket, waits)), waits_in=waits))
    for side in sides:
        side.novel = side.entry is not None and side.entry.op not in history
    point = StuckPoint(group, seq, sides)
    order = (
        "waiting",
        "other_op",
        "other_shape",
        "behind",
        "lagging",
        "entered",
        "no_group",
        "idle",
        "elsewhere",
    )
    point.sides.sort(key=lambda s: (order.index(s.state) if s.state in order else 9, s.ranks[:1]))
    if len(point.sides) > MAX_SIDES:
        point.dropped_sides = sum(len(s.ranks) for s in point.sides[MAX_SIDES:])
        point.sides = point.sides[:MAX_SIDES]
    point.waits_on = sorted({s.waits_in for s in point.side("elsewhere") if s.waits_in})
    return point


def _entered_sides(members: list[tuple[int, list[Entry]]], state: str) -> list[Side]:
    """Ranks that entered one op. Among the majority, those that have not finished it
    while others have are behind the group; those whose GPU has not started it while
    others' has (NCCL 'scheduled' among 'started') are lagging."""

    def side(name: str, group: list[tuple[int, list[Entry]]]) -> Side:
        first = next((at[0] for _, at in group if at), None)
        return Side(name, sorted(r for r, _ in group), first)

    if state != "waiting":
        return [side(state, members)]
    done = [(r, at) for r, at in members if at and all(e.done for e in at)]
    if done and len(done) < len(members):
        rest = [m for m in members if m not in done]
        return [side("waiting", done), side("behind", rest)]
    started = any(at and at[0].state == "started" for _, at in members)
    lagging = [(r, at) for r, at in members if at and at[0].state == "scheduled"]
    if not started or not lagging:
        return [side(state, members)]
    rest = [(r, at) for r, at in members if not (at and at[0].state == "scheduled")]
    return [side(state, rest), side("lagging", lagging)]


def _roots(points: list[StuckPoint]) -> None:
    """A stuck point whose only outliers wait in another stuck point is that one's victim;
    in a cycle of them (a subgroup op some members skipped), the smallest group is the root."""
    by_key = {p.key: p for p in points}
    by_group = {p.group.name: p for p in points}

    def target(label: str) -> StuckPoint | None:
        if label == "p2p":
            return None
        name = label.rpartition(":")[0]
        return by_key.get(label) or by_group.get(name)

    own = ("other_op", "other_shape", "idle", "no_dump", "lagging", "behind", "no_group")
    for point in points:
        point.root = any(point.side(s) for s in own) or not point.waits_on
        if not point.root and not any(target(w) for w in point.waits_on):
            point.root = True  # waits on ranks blocked in p2p or in a group not stuck
    for point in points:
        if point.root:
            continue
        seen = [point]
        current: StuckPoint | None = point
        while current is not None and not current.root:
            nxt = next((t for w in current.waits_on if (t := target(w)) is not None), None)
            if nxt is None or nxt in seen:
                if nxt is not None:  # a cycle: its smallest group is where members split
                    cycle = seen[seen.index(nxt) :]
                    smallest = min(cycle, key=lambda p: (len(p.group.members), p.group.name))
                    smallest.root = True
                break
            seen.append(nxt)
            current = nxt


def _global_peer(group: GroupInfo, entry: Entry) -> int | None:
    if entry.peer is None:
        return None
    members = group.members  # sorted: the group-local rank is the index
    return members[entry.peer] if 0 <= entry.peer < len(members) else None


def _p2p_waits(
    dumps: Mapping[int, RankDump], groups: Mapping[GroupKey, GroupInfo]
) -> list[P2PWait]:
    """Ranks blocked in a send/recv whose peer posted no matching op: cycles (both send
    first) and chains ending at a rank that is elsewhere."""
    waits: dict[int, int] = {}
    ops: dict[int, Entry] = {}
    for rank, dump in dumps.items():
        entry = dump.blocked
        if entry is None or not entry.p2p:
            continue
        group = groups.get(dump.key_of(entry))
        peer = _global_peer(group, entry) if group else None
        if peer is None:
            continue
        ops[rank] = entry
        other = dumps.get(peer)
        if other is not None and _matched(rank, entry, other, groups):
            continue
        waits[rank] = peer
    found: list[P2PWait] = []
    owner: dict[int, P2PWait] = {}
    for start in sorted(waits):
        if start in owner:
            continue
        path: list[int] = []
        node = start
        while node in waits and node not in path and node not in owner:
            path.append(node)
            node = waits[node]
        if node in owner:  # joins a chain or cycle found before
            wait = owner[node]
            wait.ranks = sorted({*wait.ranks, *path})
            wait.entries.update((r, ops[r]) for r in path)
        elif node in path:
            cycle = sorted(path[path.index(node) :])
            wait = P2PWait(sorted(path), cycle, True, None, "cycle", {r: ops[r] for r in path})
            found.append(wait)
        else:
            other = dumps.get(node)
            if other is None:
                state = "no_dump"
            elif other.blocked is None:
                state = "idle"
            else:
                state = "collective" if not other.blocked.p2p else "unknown"
            wait = P2PWait(sorted(path), [node], False, node, state, {r: ops[r] for r in path})
            tail_entry = (other.blocked or other.last) if other is not None else None
            if tail_entry is not None:
                wait.entries[node] = tail_entry
            found.append(wait)
        for rank in path:
            owner[rank] = wait
    return found[:MAX_STUCK]


def _matched(
    rank: int, entry: Entry, other: RankDump, groups: Mapping[GroupKey, GroupInfo]
) -> bool:
    """`other` has an unfinished op that completes `rank`'s send or recv."""
    want = "recv" if entry.op == "send" else "send"
    for track in other.groups.values():
        for candidate in track.p2p_pending:
            if candidate.op != want:
                continue
            group = groups.get(other.key_of(candidate))
            if group is not None and _global_peer(group, candidate) == rank:
                return True
    return False


def to_op(entry: Entry, group: GroupInfo | None) -> FROp:
    location = (
        Location(file=entry.frame[1], line=entry.frame[2], function=entry.frame[0])
        if entry.frame
        else None
    )
    return FROp(
        op=entry.op,
        seq=entry.seq,
        p2p=entry.p2p,
        group=entry.group,
        state=entry.state,
        done=entry.done,
        input_sizes=[list(s) for s in entry.in_sizes[:8]],
        input_dtypes=list(entry.in_dtypes[:8]),
        output_sizes=[list(s) for s in entry.out_sizes[:8]],
        peer=_global_peer(group, entry) if group and entry.p2p else None,
        location=location,
        text=entry.describe(),
    )


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


def stuck_payload(point: StuckPoint, world: int) -> FRStuckGroup:
    return FRStuckGroup(
        group=point.group.name,
        desc=point.group.desc,
        members=len(point.group.members),
        membership=point.group.membership,
        world=world,
        seq=point.seq,
        sides=[
            FRSide(
                state=s.state,
                ranks=s.ranks,
                op=to_op(s.entry, point.group if not s.entry.p2p else None) if s.entry else None,
                waits_in=s.waits_in,
                novel=s.novel,
            )
            for s in point.sides
        ],
        more_ranks=point.dropped_sides,
        waits_on=point.waits_on,
        root=point.root,
    )


def p2p_payload(wait: P2PWait, analysis: Analysis) -> FRP2PWait:
    groups = {g.key: g for g in analysis.groups}
    ops = {}
    for rank, entry in wait.entries.items():
        dump = analysis.dumps.get(rank)
        ops[rank] = to_op(entry, groups.get(dump.key_of(entry)) if dump else None)
    return FRP2PWait(
        ranks=wait.ranks,
        culprits=wait.culprits,
        cycle=wait.cycle,
        sink=wait.sink,
        sink_state=wait.sink_state,
        ops=ops,
    )


def overview(analysis: Analysis) -> FROverview:
    dumps = analysis.dumps.values()
    return FROverview(
        dumps=len(analysis.dumps),
        ranks=format_ranks(sorted(analysis.dumps)),
        world=len(analysis.world),
        missing=analysis.missing,
        versions=sorted({d.version for d in dumps if d.version}),
        backends=sorted({d.backend for d in dumps if d.backend}),
        groups=len(analysis.groups),
        stuck_groups=len(analysis.stuck),
        entries=sum(d.entries for d in dumps),
        files=[d.path for d in list(dumps)[:5]],
    )


def summarize(point: FRStuckGroup) -> str:
    head = f"group {point.group}{f' ({point.desc})' if point.desc and point.desc != 'undefined' else ''}"
    parts = "; ".join(s.describe() for s in point.sides)
    more = f"; {point.more_ranks} more ranks in other states" if point.more_ranks else ""
    return f"{head}, {point.members} ranks, stuck at seq {point.seq}: {parts}{more}"
