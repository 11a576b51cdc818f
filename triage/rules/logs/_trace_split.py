"""Where the tracebacks of a hung job put each rank, and which ranks stand apart.

A traceback of a timed-out collective (gloo, monitoredBarrier, blocking wait) is the rank's
stack at the hang: the op it waited in and the user line that called it. Ranks whose
tracebacks end at another call than the majority's are the split the log rules read.
"""

from __future__ import annotations

from dataclasses import dataclass

from triage.models import Evidence, Location
from triage.observations import Frame, RankState, TracebackRecord
from triage.readers import signatures
from triage.readers.source import Block
from triage.readers.stacks import classify
from triage.registry import EvidenceSet
from triage.rules.logs._comm_view import TIMEOUT_TEXT
from triage.rules.logs._signals import tracebacks
from triage.rules.stacks._hang_view import (
    StateGroup,
    branch_of,
    conditional_wait,
    excluding_branch,
    past_the_loop,
    skipped_branch,
)

TIMEOUTS = ("hang.watchdog_timeout", "hang.gloo_timeout", "hang.monitored_barrier")


@dataclass
class TraceSplit:
    """Ranks whose timeout tracebacks end at another collective call than the majority's.

    A traceback of a timed-out collective (gloo, monitoredBarrier, blocking wait) is the
    rank's stack at the hang: the op it waited in and the user line that called it.
    `past_loop` says the culprits stand after the loop that still holds the others (or
    the reverse), read from the source; None when the source cannot tell.
    """

    culprit: StateGroup
    majority: StateGroup | None
    past_loop: bool | None
    groups: list[StateGroup]
    branch: str = ""
    #: The call the culprits skipped, where an `if` around the majority's call left them out.
    skipped: Location | None = None

    def sides(self) -> str:
        """'rank 0 in collective broadcast at a.py:11; rank 1 in collective all_reduce at ...'."""
        return "; ".join(f"{g.label} in {g.where()}" for g in self.groups[:4])


def timeout_stacks(evidence: EvidenceSet) -> list[tuple[Evidence, RankState]]:
    """Each rank's last traceback of a timed-out collective, read as its stack at the hang.

    A rank whose collective ended in a closed connection instead (its peer timed out first
    and exited) stood in that collective all the same: its traceback counts too, once some
    rank's own timeout shows the job hung rather than crashed.
    """
    records = [(i, r, r.rank) for i, r in tracebacks(evidence, dumps=False) if r.rank is not None]
    if not records:  # a live hang has none: spare it loading the whole signature table
        return []
    table = signatures.load()
    timeouts = [table[n] for n in (*TIMEOUTS, "hang.monitored_barrier_peer")]
    peers = [sig for sig in table.values() if sig.peer_symptom]
    timed: dict[int, tuple[Evidence, RankState]] = {}
    closed: dict[int, tuple[Evidence, RankState]] = {}
    for item, record, rank in records:
        if any(sig.match(record.message) is not None for sig in timeouts) or _store_wait(record):
            into = timed
        elif any(sig.match(record.message) is not None for sig in peers):
            into = closed
        else:
            continue
        state = classify(record.frames, pid=-1 - rank, rank=rank)
        if state.activity.waits_on_peers:
            into[rank] = (item, state)
    if not timed:
        return []
    return [*timed.values(), *(v for r, v in closed.items() if r not in timed)]


def _store_wait(record: TracebackRecord) -> bool:
    """A store wait that timed out (`DistStoreError: wait timeout after 10000ms, keys: ...`):
    new_group's and init_process_group's barriers wait on the store for every member."""
    return bool(
        record.exception
        and record.exception.endswith("DistStoreError")
        and TIMEOUT_TEXT.search(record.message)
    )


def trace_split(stacks: list[tuple[Evidence, RankState]]) -> TraceSplit | None:
    by_where: dict[tuple[object, ...], StateGroup] = {}
    for item, state in stacks:
        group = by_where.setdefault(state.signature(), StateGroup([]))
        group.states.append(state)
        group.evidence.append(item.id)
    groups = sorted(by_where.values(), key=lambda g: (-len(g.states), g.ranks))
    if len(groups) < 2:
        return None
    majority, others = groups[0], groups[1:]
    for group in others:
        ahead = past_the_loop(group.first, majority.first)
        behind = past_the_loop(majority.first, group.first)
        if ahead or behind:
            tied = len(group.states) == len(majority.states)
            culprit = group if ahead or not tied else majority
            rest = majority if culprit is group else group
            return TraceSplit(culprit, rest, True, groups)
    excluding = [g for g in groups if excluding_branch(g)]
    if len(groups) == 2 and len(excluding) == 1:
        rest = excluding[0]
        culprit = next(g for g in groups if g is not rest)
    elif len(others[0].states) == len(majority.states):
        conditional = [g for g in groups if branch_of(g, [x for x in groups if x is not g])]
        if not conditional:  # a side that skipped a conditional call the other waits beyond
            conditional = [
                g for g in groups if skipped_branch(g, [x for x in groups if x is not g])
            ]
        if len(conditional) != 1:
            merged = StateGroup(
                [s for g in groups for s in g.states], [e for g in groups for e in g.evidence]
            )
            return TraceSplit(merged, None, None, groups)
        culprit = conditional[0]
        rest = next(g for g in groups if g is not culprit)
    else:
        culprit = StateGroup(
            [s for g in others for s in g.states], [e for g in others for e in g.evidence]
        )
        rest = majority
    found = branch_of(culprit, [rest])
    branch = f"{found[1].file}:{found[1].line} sits under `{found[0].text}`" if found else ""
    left_out = excluding_branch(rest) if not found else None
    if left_out is not None and left_out[0].negated:  # the culprit took the `if` itself
        found = branch_of(culprit, [])
        branch = f"{found[1].file}:{found[1].line} sits under `{found[0].text}`" if found else ""
        return TraceSplit(culprit, rest, None, groups, branch)
    if not found and left_out is None:
        # the others wait later in the loop than a collective an `if` can leave out (on an
        # async collective's work.wait(), or at the next call): the culprit skipped that one
        left_out = skipped_branch(culprit, [rest])
    if left_out is not None:
        block, frame = left_out
        branch = (
            f"{frame.file}:{frame.line} sits under `{block.text}`, which leaves some ranks out: "
            f"{culprit.label} skipped that call and went on to the next collective"
        )
        return TraceSplit(culprit, rest, None, groups, branch, frame.location())
    return TraceSplit(culprit, rest, None, groups, branch)


def finished_side(traced: TraceSplit) -> tuple[StateGroup, StateGroup] | None:
    """(the ranks past the loop, those still in it) of a split read as past the loop."""
    if not traced.past_loop or traced.majority is None:
        return None
    finished, running = traced.culprit, traced.majority
    if past_the_loop(running.first, finished.first):
        finished, running = running, finished
    return finished, running


def skipped_call(traced: TraceSplit) -> tuple[StateGroup, StateGroup, Block, Frame] | None:
    """Of a split read as past the loop: ranks still in it that wait in a collective under
    an `if` whose test may differ per rank, which the finished ranks may have skipped once
    (see stacks._hang_view.conditional_wait). (finished, waiting, the `if`, the call)."""
    sides = finished_side(traced)
    if sides is None:
        return None
    finished = sides[0]
    for group in traced.groups:
        if group.ranks == finished.ranks:
            continue
        found = conditional_wait(group, finished)
        if found is not None:
            return finished, group, found[0], found[1]
    return None
