"""hang.mismatched_collective from stacks: ranks block in different collectives."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import RankActivity
from triage.rulebook import EvidenceSet, rule
from triage.rules._hang import StateGroup, coverage_factor, hang_view, past_the_loop
from triage.source import Block, rank_condition


@rule("stacks.mismatched_collective", "hang.mismatched_collective")
def mismatched_collective(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks wait in different collectives, or in the same op from different lines.

    What it detects:
    Two or more groups of ranks blocked in collectives whose op or user call site differ,
    on the same process group, with none past the training loop.

    Why it happens:
    A collective under a rank-dependent branch (`if rank == 0: dist.broadcast(...)`),
    collectives issued in a different order on different ranks (dict/set iteration,
    data-dependent control flow), or an exception handler that skips one.

    Evidence:
    py-spy stacks: the op frame in torch/distributed/distributed_c10d.py and the user
    frame that called it differ across groups; the source shows the rank-dependent `if`
    around the minority's line when the file is readable.

    Fix:
    Every rank must issue the same collectives in the same order: hoist the collective out
    of the rank-dependent branch (compute on all ranks, use the result on one), or make the
    branch condition identical on all ranks.

    Known false positives:
    Two dumps taken while ranks are still progressing can differ by one step; a real hang
    keeps the same lines on a second dump. Ranks past the loop are reported as
    hang.uneven_inputs instead.

    References:
    TORCH_DISTRIBUTED_DEBUG=DETAIL reports collective fingerprint mismatches at the call.
    """
    view = hang_view(evidence)
    blocked = [g for g in view.waiting if g.first.activity is RankActivity.collective]
    if len(blocked) < 2 or len({g.first.group for g in blocked}) > 1:
        return
    majority = max(blocked, key=lambda g: len(g.states))
    others = [g for g in blocked if g is not majority]
    if any(
        past_the_loop(g.first, majority.first) or past_the_loop(majority.first, g.first)
        for g in others
    ):
        return
    culprit = _culprit(majority, others)
    condition = _condition(culprit)
    same_op = {g.first.op for g in blocked}
    how = (
        f"the same op ({culprit.first.op}) from different lines"
        if len(same_op) == 1
        else "different collectives"
    )
    branch = (
        f" Line {culprit.location.line} sits under `{condition.text}` (line {condition.start})."
        if condition and culprit.location
        else ""
    )
    confidence = (0.92 if condition else 0.8) * coverage_factor(view)
    yield Finding(
        rule_id="stacks.mismatched_collective",
        cause_id="hang.mismatched_collective",
        title=f"{culprit.label} called a collective the other ranks did not",
        summary=(
            f"Ranks block in {how}: {culprit.label} in {culprit.where()}, while the "
            f"{majority.label} wait in {majority.where()}.{branch}"
        ),
        ranks=culprit.ranks,
        location=culprit.location,
        other_locations=[g.location for g in blocked if g is not culprit and g.location],
        confidence=round(confidence, 3),
        evidence=[e for g in blocked for e in g.evidence[:3]],
        fix=(
            f"Make every rank issue the same collectives in the same order: the "
            f"{culprit.first.op} at {culprit.location} runs only on {culprit.label}"
            + (f" (because of `{condition.text}`)" if condition else "")
            + "; hoist it out of the branch or run it on all ranks."
        ),
    )


def _culprit(majority: StateGroup, others: list[StateGroup]) -> StateGroup:
    """The minority; among equals, the group whose call sits under a rank-dependent `if`."""
    candidates = (
        [majority, *others]
        if all(len(g.states) == len(majority.states) for g in others)
        else others
    )
    conditional = [g for g in candidates if _condition(g)]
    pool = conditional or candidates
    return min(pool, key=lambda g: (len(g.states), g.ranks))


def _condition(group: StateGroup) -> Block | None:
    frame = group.first.user_frame
    return rank_condition(frame.file, frame.line) if frame and frame.line else None
