"""hang.p2p_deadlock from stacks: point-to-point ops that can never match."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import RankActivity, RankState
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import StateGroup, coverage_factor, hang_view
from triage.text import format_ranks

_SENDS = {"send", "isend", "send_object_list"}
_RECVS = {"recv", "irecv", "recv_object_list"}


@rule("stacks.p2p_deadlock", "hang.p2p_deadlock")
def p2p_deadlock(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks block in send/recv whose partners never post the matching op.

    What it detects:
    Ranks blocked in point-to-point ops where the peer is not in the matching op: both
    sides of a pair receive first (or both send first), or a recv names a source that is
    itself waiting for someone else, closing a cycle; or a few ranks in send/recv (or an
    `irecv().wait()`) while every other rank waits in a collective: the other side is
    never posted.

    Why it happens:
    Symmetric code (`recv` then `send` on every rank), pipeline schedules whose order
    differs between stages, or wrong `src`/`dst` arithmetic at the ends of a ring.

    Evidence:
    py-spy stacks in send/recv/isend/irecv; with py-spy's `--locals` the `src`/`dst`
    arguments show who waits for whom.

    Fix:
    Order point-to-point ops so every send meets a recv: alternate by rank parity (even
    ranks send first, odd ranks receive first), or post both with `isend`/`irecv`
    (`batch_isend_irecv`) and wait on them together.

    Known false positives:
    A receiver whose sender is merely slow looks the same for a moment; if the sender is
    in compute, hang.rank_not_in_collective is reported instead.

    References:
    torch.distributed.batch_isend_irecv; torch.distributed.P2POp.
    """
    view = hang_view(evidence)
    p2p = [s for g in view.groups for s in g.states if s.activity is RankActivity.p2p]
    if not p2p:
        return
    by_rank = {s.rank: s for g in view.groups for s in g.states if s.rank is not None}
    cycle = _wait_cycle(p2p, by_rank)
    kinds = {_kind(s) for s in p2p}
    if cycle:
        culprits, how, confidence = cycle, "each waits for a peer that waits in turn", 0.9
    elif len(p2p) >= 2 and len(kinds) == 1 and None not in kinds:
        culprits = sorted(s.rank for s in p2p if s.rank is not None)
        how, confidence = (
            f"all of them {kinds.pop()} first, so no {'send' if 'recv' in kinds else 'recv'} is ever posted",
            0.8,
        )
    elif (unmatched := _unmatched(p2p, view.groups)) is not None:
        culprits, how, confidence = unmatched
    else:
        return
    states = [by_rank[r] for r in culprits if r in by_rank] or p2p
    first = states[0]
    yield Finding(
        title=f"send/recv deadlock between ranks {format_ranks(culprits)}",
        summary=(
            f"Ranks {format_ranks(culprits)} block in point-to-point ops: "
            + "; ".join(_describe(s) for s in states[:6])
            + f". {how.capitalize()}."
        ),
        ranks=culprits,
        location=first.user_frame.location() if first.user_frame else None,
        other_locations=[s.user_frame.location() for s in states[1:4] if s.user_frame],
        confidence=round(confidence * coverage_factor(view), 3),
        evidence=[f"stack:rank{s.rank}" for s in states[:8]],
        fix=(
            "Order send/recv so that every send meets a posted recv: even ranks send first and "
            "odd ranks receive first, or post both with dist.batch_isend_irecv([...]) and wait on all."
        ),
    )


def _unmatched(
    p2p: list[RankState], groups: list[StateGroup]
) -> tuple[list[int], str, float] | None:
    """A few ranks block in send/recv while every other rank waits in a collective: nobody
    will post the other side (an irecv for a message no rank sends, a send nobody reads)."""
    others = [s for g in groups for s in g.states if s.activity is not RankActivity.p2p]
    if not others or len(p2p) * 2 > len(p2p) + len(others):
        return None
    if not all(s.activity is RankActivity.collective for s in others):
        return None
    ops = sorted({str(s.op) for s in others})
    culprits = sorted(s.rank for s in p2p if s.rank is not None)
    how = (
        f"every other rank waits in {', '.join(ops)}, so the matching "
        f"{'send' if _kind(p2p[0]) == 'recv' else 'recv'} is never posted"
    )
    return culprits, how, 0.7


def _kind(state: RankState) -> str | None:
    if state.op in _SENDS:
        return "send"
    if state.op in _RECVS:
        return "recv"
    return None


def _describe(state: RankState) -> str:
    loc = state.user_frame.location() if state.user_frame else None
    peer = (
        f"({'dst' if _kind(state) == 'send' else 'src'}={state.peer})"
        if state.peer is not None
        else ""
    )
    at = f" at {loc.file}:{loc.line}" if loc else ""
    return f"rank {state.rank} in {state.op}{peer}{at}"


def _wait_cycle(p2p: list[RankState], by_rank: dict[int, RankState]) -> list[int]:
    """Follow 'rank waits for peer' edges; a cycle of unmatched waits is a deadlock."""
    waits_for: dict[int, int] = {}
    for state in p2p:
        peer = by_rank.get(state.peer) if state.peer is not None else None
        if state.rank is None or peer is None or peer.rank is None:
            continue
        matched = (
            peer.activity is RankActivity.p2p
            and peer.peer == state.rank
            and _kind(peer) != _kind(state)
        )
        if not matched and peer.activity is RankActivity.p2p:
            waits_for[state.rank] = peer.rank
    for start in waits_for:
        seen: list[int] = []
        node = start
        while node in waits_for and node not in seen:
            seen.append(node)
            node = waits_for[node]
        if node in seen:
            return sorted(seen[seen.index(node) :])
    return []
