"""hang.uneven_inputs from stacks: some ranks left the training loop, others did not."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import (
    conditional_wait,
    coverage_factor,
    hang_view,
    is_exiting,
    or_skipped,
    past_the_loop,
)


@rule("stacks.uneven_inputs", "hang.uneven_inputs")
def uneven_inputs(evidence: EvidenceSet) -> Iterator[Finding]:
    """Some ranks finished the training loop while others are still inside it.

    What it detects:
    A group of ranks stands after the loop (a final barrier, a checkpoint, an evaluation,
    destroy_process_group) while the rest wait in a collective inside the loop. The
    smaller side is the odd one; with as many ranks on each side, the side that left the
    loop first (0.7 at most: it ran out of data, or the other side had more).

    Why it happens:
    Ranks got different numbers of batches: a dataset split without DistributedSampler,
    `drop_last=False` with a size not divisible by the world size, filtering or
    bucketing that differs per rank, an early `break` on one rank.

    Evidence:
    py-spy stacks plus the user's source: in the function where the call paths split,
    one group's line lies after the loop that still holds the other group's line.
    Without the source, a rank in destroy_process_group or at exit.

    Fix:
    Give every rank the same number of steps: DistributedSampler(drop_last=True), an
    all-reduced step count (`min` over ranks), or DDP's `Join` context manager for
    genuinely uneven inputs.

    Known false positives:
    A loop that ends on a rank-dependent condition on purpose looks the same; the fix is
    then still to agree on the step count across ranks.

    References:
    torch.distributed.algorithms.Join; torch.utils.data.DistributedSampler.
    """
    view = hang_view(evidence)
    majority = view.majority
    if majority is None:
        return
    for group in view.groups:
        if group is majority:
            continue
        ahead = past_the_loop(group.first, majority.first)
        behind = past_the_loop(majority.first, group.first)
        if ahead:
            finished, running, confidence = group, majority, 0.88
        elif behind:
            finished, running, confidence = majority, group, 0.82
        elif is_exiting(group.first) and ahead is None:
            finished, running, confidence = group, majority, 0.6
        else:
            continue
        # As many ranks on each side: the side that left the loop first ran out of data
        # (the usual story: a short shard), named at a lower confidence.
        tie = len(group.states) == len(majority.states)
        culprit = finished if tie else group
        if tie:
            confidence = min(confidence, 0.7)
        skip = next(
            (
                found
                for g in view.waiting
                if g is not finished and (found := conditional_wait(g, finished))
            ),
            None,
        )
        also = ""
        if skip is not None:
            block, frame = skip
            confidence = min(confidence, 0.5)
            also = or_skipped(block, frame)
        yield Finding(
            title=f"{finished.label} left the training loop while {running.label} did not",
            summary=(
                f"{finished.label.capitalize()} already {finished.verb('stand')} after the "
                f"loop, in {finished.where()}, while {running.label} still "
                f"{running.verb('wait')} inside it, in {running.where()}: the ranks ran "
                f"different numbers of steps.{also}"
            ),
            ranks=culprit.ranks,
            location=culprit.location,
            other_locations=[
                g.location for g in (finished, running) if g is not culprit and g.location
            ],
            confidence=round(confidence * coverage_factor(view), 3),
            evidence=finished.evidence[:3] + running.evidence[:3],
            fix=(
                "Give every rank the same number of steps: shard with DistributedSampler(drop_last=True), "
                "agree on the step count with an all_reduce(MIN) before the loop, or wrap the loop in "
                "torch.distributed.algorithms.Join for uneven inputs."
            ),
        )
        return
