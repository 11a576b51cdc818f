"""What a rank's Flight Recorder dump is reduced to: its ops as compact entries, and per
process group the few of them that show where the rank stands.

Summaries are bounded (RECENT finished collectives, a WINDOW of unfinished ones,
P2P_KEEP pending sends/recvs per group), so memory does not grow with a dump's length.
Groups are keyed by name and members; member lists are interned, one tuple per distinct
list, so thousands of dumps share them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter

RECENT = 6  # finished collectives kept per group before the first unfinished one
WINDOW = 32  # unfinished collectives kept per group
P2P_KEEP = 8  # unfinished point-to-point ops kept per group

#: Collectives whose per-rank buffers legitimately differ (torch's analyzer skips them too).
UNEVEN_INPUT = frozenset(
    {"all_to_all", "all_to_all_single", "all_to_all_v_single", "scatter", "reduce_scatter_v"}
)
UNEVEN_OUTPUT = frozenset(
    {"all_to_all", "all_to_all_single", "all_to_all_v_single", "gather", "all_gather_v"}
)


class NotFlightRecorder(Exception):
    """The file is some other dump or document: skipped without a word."""


class UnreadableDump(Exception):
    """A Flight Recorder dump that cannot be read (cut off, corrupt, refused): a gap."""


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

    def __reduce__(self) -> tuple[type[Entry], tuple[object, ...]]:
        """Pickled as its fields in order: worker processes send back thousands, and the
        dataclass default (a state dict set field by field) costs several times more."""
        return Entry, _entry_fields(self)

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


_entry_fields = attrgetter(*Entry.__slots__)


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
    #: The world holds at least this many ranks: gloo's unnamed pg_config item lists the
    #: group-local ranks of the last group made (every rank, when only the default exists).
    least_world: int = 0

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
