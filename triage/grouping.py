"""Rank groups: ranks in identical states collapse into one line of the report."""

from __future__ import annotations

from psutil import STATUS_ZOMBIE as ZOMBIE

from triage.models import Evidence, RankGroup
from triage.observations import (
    FROp,
    FROverview,
    FRP2PWait,
    FRSide,
    FRStuckGroup,
    MissingRank,
    RankProcess,
    RankState,
)
from triage.readers.stacks import build_stack_tree, render_stack_tree
from triage.registry import EvidenceSet
from triage.text import format_ranks


def latest_stacks(evidence: EvidenceSet) -> list[tuple[Evidence, RankState]]:
    """One stack per process, its latest: a rank dumped twice (a minute apart, or by py-spy
    and by faulthandler) is one rank, where it stood last.

    Later evidence is later in time (logs are read in file order, lines in line order);
    a live py-spy stack (source `pid:N`) is newer than any dump in a log. Stacks of unknown
    rank stay apart by host and pid. A dump's other threads never stand in for its main
    thread (the one that runs `<module>`): they are one process, and the main thread is
    where the rank is. Order: each process's first appearance.
    """

    def compute() -> list[tuple[Evidence, RankState]]:
        latest: dict[tuple[object, ...], tuple[Evidence, RankState]] = {}
        for item, state in evidence.payloads(RankState):
            key = ("rank", state.rank) if state.rank is not None else ("pid", state.host, state.pid)
            kept = latest.get(key)
            if kept is None or _is_live(item) or _replaces(kept, state):
                latest[key] = (item, state)
        return list(latest.values())

    return evidence.derived("latest_stacks", compute)


def _is_live(item: Evidence) -> bool:
    return item.source.startswith("pid:")


def _replaces(kept: tuple[Evidence, RankState], state: RankState) -> bool:
    """A later dump replaces a dump, unless a helper thread would replace the main one."""
    return not _is_live(kept[0]) and (_is_main(state) or not _is_main(kept[1]))


def _is_main(state: RankState) -> bool:
    """The script's own thread: its outermost frame runs a module's top level."""
    return bool(state.call_path) and state.call_path[0].function == "<module>"


def state_groups(evidence: EvidenceSet) -> list[list[tuple[Evidence, RankState]]]:
    """Latest stacks grouped by state signature, in order of first appearance; computed once."""

    def compute() -> list[list[tuple[Evidence, RankState]]]:
        by_signature: dict[tuple[object, ...], list[tuple[Evidence, RankState]]] = {}
        for item, state in latest_stacks(evidence):
            by_signature.setdefault(state.signature(), []).append((item, state))
        return list(by_signature.values())

    return evidence.derived("state_groups", compute)


def group_ranks(evidence: EvidenceSet) -> list[RankGroup]:
    """Largest group first: the outliers are the short lines at the bottom.

    Stacks say where each rank stands; without any, the Flight Recorder's stuck points do.
    """
    by_state = [[state for _, state in members] for members in state_groups(evidence)]
    groups = [_group_of_states(states) for states in by_state] or flight_recorder_groups(evidence)

    seen = {state.rank for states in by_state for state in states}
    seen |= {rank for group in groups for rank in group.ranks}
    seen_pids = {state.pid for _, state in evidence.payloads(RankState)}
    unread = [p for _, p in evidence.payloads(RankProcess) if p.pid not in seen_pids]
    zombies = [p for p in unread if p.status == ZOMBIE]
    if zombies:  # no stack to read, and nothing failed: the process is gone
        groups.append(_group_of_processes(zombies, "exited (zombie)", "not reaped by its parent"))
    if len(zombies) < len(unread):
        rest = [p for p in unread if p.status != ZOMBIE]
        groups.append(_group_of_processes(rest, "stack unreadable", "see gaps"))
    missing = [m.rank for _, m in evidence.payloads(MissingRank) if m.rank is not None]
    if set(missing) - seen:
        groups.append(
            RankGroup(state="no live process", ranks=sorted(set(missing) - seen), detail="exited?")
        )
    return sorted(groups, key=lambda g: (-(len(g.ranks) + len(g.pids)), min(g.ranks or [1 << 30])))


def _group_of_processes(processes: list[RankProcess], state: str, detail: str) -> RankGroup:
    return RankGroup(
        state=state,
        ranks=sorted(p.rank for p in processes if p.rank is not None),
        pids=sorted(p.pid for p in processes if p.rank is None),
        rank_pids={p.rank: p.pid for p in processes if p.rank is not None},
        nodes=sorted({p.node for p in processes if p.node}),
        detail=detail,
    )


def _group_of_states(states: list[RankState]) -> RankGroup:
    first = states[0]
    return RankGroup(
        state=first.describe(),
        ranks=sorted(s.rank for s in states if s.rank is not None),
        pids=sorted(s.pid for s in states if s.rank is None),
        rank_pids={s.rank: s.pid for s in states if s.rank is not None and s.pid > 0},
        nodes=sorted({s.node for s in states if s.node}),
        detail=first.detail,
        location=first.user_frame.location() if first.user_frame else None,
    )


def flight_recorder_groups(evidence: EvidenceSet) -> list[RankGroup]:
    """Ranks by the op the Flight Recorder shows them in: the sides of the stuck points
    (root points first, each rank once), send/recv no peer matches, and ranks with no dump.

    A rank is grouped by what it does, not by its part in one stuck point, so a rank that
    blocks group 1 while waiting in group 0's all_reduce joins the ranks waiting there.
    """
    groups: dict[tuple[object, ...], tuple[RankGroup, list[str]]] = {}
    placed: set[int] = set()

    def place(ranks: list[int], state: str, detail: str, op: FROp | None) -> None:
        ranks = [r for r in ranks if r not in placed]
        if not ranks:
            return
        placed.update(ranks)
        location = op.location if op is not None else None
        key = (state, location.file if location else None, location.line if location else None)
        group, details = groups.setdefault(key, (RankGroup(state=state, ranks=[]), []))
        if detail not in details:
            details.append(detail)
        group.location = group.location or location
        group.ranks = sorted(group.ranks + ranks)

    points = [p for _, p in evidence.payloads(FRStuckGroup)]
    for point in sorted(points, key=lambda p: not p.root):
        for side in point.sides:
            place(side.ranks, _fr_state(point, side), _fr_detail(point, side), side.op)
    for _, wait in evidence.payloads(FRP2PWait):
        how = "a cycle" if wait.cycle else f"a chain to rank {wait.sink}"
        for rank, op in sorted(wait.ops.items()):
            place([rank], f"in {op.text}", f"send/recv no peer matches: {how}", op)
    for _, seen in evidence.payloads(FROverview):
        place(
            seen.missing, "no Flight Recorder dump", "exited, or its file was not collected", None
        )
    for group, details in groups.values():
        more = f"; {len(details) - 3} more" if len(details) > 3 else ""
        group.detail = "; ".join(details[:3]) + more
    return [group for group, _ in groups.values()]


def _fr_state(point: FRStuckGroup, side: FRSide) -> str:
    """What the side's ranks do, in words that do not depend on the stuck point."""
    op = side.op
    fixed = {
        "no_dump": "no Flight Recorder dump",
        "unreadable": "Flight Recorder dump unreadable",
        "no_group": f"never created group {point.group}",
    }
    if side.state in fixed:
        return fixed[side.state]
    on = f" on group {op.group}" if op is not None and not op.p2p else ""
    if side.state == "idle":
        return f"in no collective; last {op.text}{on}" if op else "in no collective"
    if op is None:
        unknown = side.state == "unknown"
        return f"no op of group {point.group} in its buffer" if unknown else side.state
    return f"{'past' if op.done else 'in'} {op.text}{on}"


def _fr_detail(point: FRStuckGroup, side: FRSide) -> str:
    """The side's part in the stuck point: 'group 0 stuck at seq 13: rank 0 is in broadcast
    [1 Float] seq 13 (pending) instead'."""
    return f"group {point.group} stuck at seq {point.seq}: {side.describe()}"


def merged_stacks(evidence: EvidenceSet, limit: int = 40) -> list[str]:
    """The stack-prefix tree of every rank read: where ranks share frames and where they split."""
    states = [state for _, state in latest_stacks(evidence)]
    if not states:
        return []
    return render_stack_tree(build_stack_tree(states), format_ranks, limit)
