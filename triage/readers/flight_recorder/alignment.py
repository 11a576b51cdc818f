"""Cross-rank alignment: every rank's summaries matched per process group by sequence
number.

The stuck point of a group is its oldest unfinished collective, and at that point every
member either entered it (with some op, sizes and dtypes), never enqueued it (idle, or
blocked in another group's op), or left no dump. Stuck points that only wait on another
group's stuck point are victims; the rest, and point-to-point waits that no peer
matches, are what the rules turn into findings. Ranks in identical states are grouped,
so evidence stays a few items for 4,096 ranks as for 4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from triage.readers.flight_recorder.dump_records import Entry, GroupKey, GroupTrack, RankDump

MAX_SIDES = 8  # rank groups kept per stuck point; the rest are counted
MAX_STUCK = 20  # stuck points reported; victims first dropped
_DEFAULT_DESC = "default_pg"


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
    (NCCL); else the default group holds every rank up to the highest seen (or as many as
    gloo's unnamed group list names: a last rank that left no dump is still a member), and
    a subgroup the ranks that recorded ops on it (gloo)."""
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
    least = max((d.least_world for d in dumps.values()), default=0)
    world = tuple(range(max([top, *dumps, *unreadable, least - 1]) + 1)) if dumps else ()
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
    ran = [e for t in group.tracks.values() for e in t.recent if e.seq < seq]
    history = {e.op for e in ran}
    shapes = {e.signature() for e in ran}

    def rank_order(
        kv: tuple[tuple[object, ...], list[tuple[int, list[Entry]]]],
    ) -> tuple[int, bool, bool, int]:
        """Most members first; on a tie, an op the group ran before beats a new one, then
        sizes it ran before beat new ones (two ranks, one of them passing a new shape)."""
        ops = {e.op for _, at in kv[1] for e in at}
        new_shape = not set(kv[0]) <= shapes
        return (-len(kv[1]), not ops <= history, new_shape, min(r for r, _ in kv[1]))

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
    in a cycle of them (a subgroup op some members skipped), where they split is the root."""
    by_key = {p.key: p for p in points}
    by_group = {p.group.name: p for p in points}

    def target(label: str) -> StuckPoint | None:
        if label == "p2p":
            return None
        name = label.rpartition(":")[0]
        return by_key.get(label) or by_group.get(name)

    def waits(a: StuckPoint, b: StuckPoint) -> bool:
        return any(target(w) is b for w in a.waits_on)

    def split_point(cycle: list[StuckPoint]) -> StuckPoint:
        """Where a cycle's members split: two points that wait on each other (a subgroup
        call some members skipped, and the wider collective they went on to) are its heart,
        and a point that only waits on them is their victim; of those, the smallest group."""
        mutual = [
            p for p in cycle if any(q is not p and waits(p, q) and waits(q, p) for q in cycle)
        ]
        return min(mutual or cycle, key=lambda p: (len(p.group.members), p.group.name))

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
                if nxt is not None:  # a cycle: the root is where its members split
                    split_point(seen[seen.index(nxt) :]).root = True
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
