"""hang.uneven_inputs from Flight Recorder: some ranks left the training loop, others did not."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import (
    coverage,
    is_barrier,
    left_the_loop,
    location,
    split,
    stuck_groups,
    where,
)
from triage.text import agree, plural, rank_label


@rule("fr.uneven_inputs", "hang.uneven_inputs")
def fr_uneven_inputs(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: at one sequence number some ranks are past the loop, others in it.

    What it detects:
    Aligned by collective sequence number, some members of a group enqueued an op that
    their source places after the training loop (a final barrier, a checkpoint
    all_gather) while the others enqueued the loop's own collective (the gradient
    all_reduce of the next step).

    Why it happens:
    Ranks got different numbers of batches: a dataset split without DistributedSampler,
    `drop_last=False` with a size not divisible by the world size, filtering or
    bucketing that differs per rank, an early `break` on one rank. The ranks that ran out
    leave the loop and block in the next collective after it.

    Evidence:
    Flight Recorder dumps plus the user's source: both recorded lines lie in one
    function, the odd one after the other, outside the loop that holds the other, and
    not under a rank-dependent `if` (that is hang.mismatched_collective). Without the
    source, a barrier against the others' collective is a weaker hint.

    Fix:
    Give every rank the same number of steps: DistributedSampler(drop_last=True), an
    all-reduced step count (`min` over ranks), or DDP's `Join` context manager for
    genuinely uneven inputs.

    Known false positives:
    A loop that ends on a rank-dependent condition on purpose looks the same; the fix is
    then still to agree on the step count across ranks. Without the source, a barrier
    called under a rank-dependent branch inside the loop looks like one after it.

    References:
    torch.distributed.algorithms.Join; torch.utils.data.DistributedSampler; PyTorch
    Flight Recorder tutorial.
    """
    for item, point in stuck_groups(evidence):
        normal, odd, _ = split(point, "other_op")
        if normal is None:
            continue
        for side in odd:
            ahead, behind = left_the_loop(side, normal), left_the_loop(normal, side)
            if ahead:
                finished, running, confidence = side, normal, 0.85
            elif behind:
                finished, running, confidence = normal, side, 0.8
            elif ahead is None and behind is None and is_barrier(side):
                finished, running, confidence = side, normal, 0.6
            else:
                continue
            done, going = rank_label(finished.ranks), rank_label(running.ranks)
            yield Finding(
                title=f"{done} left the training loop while {going} did not",
                summary=f"Flight Recorder, group {point.group} ({plural(point.members, 'rank')}), stuck at "
                f"collective seq {point.seq}: {finished.describe()}; {running.describe()}. "
                f"{done.capitalize()} already {agree(len(finished.ranks), 'stand')} after the loop "
                f"while {going} still {agree(len(running.ranks), 'run')} it: "
                "the ranks ran different numbers of steps."
                + (
                    ""
                    if ahead or behind
                    else " Without the source to place both lines, the barrier is the only hint."
                ),
                ranks=side.ranks,
                location=location(side),
                other_locations=[loc for loc in [location(normal)] if loc],
                confidence=round(confidence * coverage(point), 3),
                evidence=[item.id, point.side_evidence_id(side)],
                fix="Give every rank the same number of steps: shard with "
                "DistributedSampler(drop_last=True), agree on the step count with an "
                "all_reduce(MIN) before the loop, or wrap the loop in "
                "torch.distributed.algorithms.Join for uneven inputs; "
                f"{done} reached {finished.op.op if finished.op else 'its op'}{where(finished)} "
                "early.",
                confirm=f"{done} ran fewer loop steps than {going} (per-rank batch counts, "
                f"or the collectives each finished before seq {point.seq} in "
                f"{point.evidence_id()})",
            )
