"""Rank groups: ranks in identical states collapse into one line of the report."""

from __future__ import annotations

from triage.models import Evidence, RankGroup
from triage.observations import MissingRank, RankProcess, RankState
from triage.rulebook import EvidenceSet
from triage.stacks import build_stack_tree, render_stack_tree
from triage.text import format_ranks


def state_groups(evidence: EvidenceSet) -> list[list[tuple[Evidence, RankState]]]:
    """Stacks grouped by state signature, in order of first appearance; computed once."""

    def compute() -> list[list[tuple[Evidence, RankState]]]:
        by_signature: dict[tuple[object, ...], list[tuple[Evidence, RankState]]] = {}
        for item, state in evidence.payloads("stack", RankState):
            by_signature.setdefault(state.signature(), []).append((item, state))
        return list(by_signature.values())

    return evidence.derived("state_groups", compute)


def group_ranks(evidence: EvidenceSet) -> list[RankGroup]:
    """Largest group first: the outliers are the short lines at the bottom."""
    by_state = [[state for _, state in members] for members in state_groups(evidence)]
    groups = [_group_of_states(states) for states in by_state]

    seen = {state.rank for states in by_state for state in states}
    seen_pids = {state.pid for states in by_state for state in states}
    unread = [p for _, p in evidence.payloads("process", RankProcess) if p.pid not in seen_pids]
    if unread:
        groups.append(
            RankGroup(
                state="stack unreadable",
                ranks=sorted(p.rank for p in unread if p.rank is not None),
                pids=sorted(p.pid for p in unread if p.rank is None),
                detail="see gaps",
            )
        )
    missing = [
        m.rank for _, m in evidence.payloads("missing_rank", MissingRank) if m.rank is not None
    ]
    if missing:
        groups.append(
            RankGroup(state="no live process", ranks=sorted(set(missing) - seen), detail="exited?")
        )
    return sorted(groups, key=lambda g: (-(len(g.ranks) + len(g.pids)), min(g.ranks or [1 << 30])))


def _group_of_states(states: list[RankState]) -> RankGroup:
    first = states[0]
    return RankGroup(
        state=first.describe(),
        ranks=sorted(s.rank for s in states if s.rank is not None),
        pids=sorted(s.pid for s in states if s.rank is None),
        detail=first.detail,
        location=first.user_frame.location() if first.user_frame else None,
    )


def merged_stacks(evidence: EvidenceSet, limit: int = 40) -> list[str]:
    """The stack-prefix tree of every rank read: where ranks share frames and where they split."""
    states = [state for _, state in evidence.payloads("stack", RankState)]
    if not states:
        return []
    return render_stack_tree(build_stack_tree(states), format_ranks, limit)
