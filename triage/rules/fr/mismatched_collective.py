"""hang.mismatched_collective from Flight Recorder: ranks in different ops at one sequence number."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import (
    apart_by_the_loop,
    coverage,
    guarded_call,
    is_subgroup,
    left_out_by,
    location,
    rank_branch,
    ranks_of,
    split,
    stuck_groups,
    where,
)
from triage.text import format_ranks, plural, rank_label


@rule("fr.mismatched_collective", "hang.mismatched_collective")
def fr_mismatched_collective(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: members of one group enqueued different collectives at one sequence number.

    What it detects:
    Aligned by collective sequence number, the group's oldest unfinished collective is
    one op (all_reduce) on most members and another op (broadcast, barrier) on the
    culprits. Also two groups over all ranks whose members each wait in the other's op.

    Why it happens:
    A collective under a rank-dependent branch (`if rank == 0: dist.broadcast(...)`), or
    collectives issued in a different order on some ranks (a dict iterated in a
    different order, a conditional all_gather before the gradient all_reduce).

    Evidence:
    Flight Recorder dumps: the op names at the stuck sequence number differ; the stacks
    the recorder kept name each side's user line. On a tie, the side whose op the group
    never ran in its recent collectives is the odd one.

    Fix:
    Make every rank issue the same collectives in the same order: hoist the collective out
    of the rank-dependent branch (every rank calls it; only the use of the result is
    conditional), or order the calls deterministically.

    Known false positives:
    Ranks that ran a different number of steps reach other collectives too
    (hang.uneven_inputs): sides whose source shows one of them past the loop that holds
    the other are left to fr.uneven_inputs; without the source, when the odd op is a final
    barrier or a checkpoint gather, check the step counts.

    References:
    PyTorch Flight Recorder tutorial; torch.distributed.flight_recorder.fr_trace.
    """
    for item, point in stuck_groups(evidence):
        normal, odd, tie = split(point, "other_op")
        odd = [s for s in odd if not apart_by_the_loop(normal, s)]  # fr.uneven_inputs
        elsewhere = [s for s in point.sides if s.state == "elsewhere"]
        if not odd and not (elsewhere and not is_subgroup(point)):
            continue
        culprits = odd or elsewhere
        first = culprits[0]
        ranks = ranks_of(culprits)
        ops = " / ".join(sorted({s.op.op for s in culprits if s.op}))
        sides = "; ".join(s.describe() for s in (normal, *culprits) if s)
        confidence = (0.6 if tie else 0.9 if odd else 0.7) * coverage(point)
        branch = rank_branch([*culprits, normal])
        skipped = left_out_by(normal) or (
            guarded_call(normal) if branch is None and not guarded_call(first) else None
        )
        at = location(first)
        if skipped is not None:
            block, at = skipped
            fix = (
                f"the group's call at line {at.line} runs only under `{block.text}` "
                f"({Path(at.file).name}:{block.start}), a test that can differ per rank: rank "
                f"{format_ranks(ranks)}, skipping it once, reached its next collective early. "
                "Make the test the same on every rank (all_reduce the flag first) or run the "
                "collective unconditionally."
            )
        elif branch is not None:
            block, loc = branch
            fix = (
                f"`{block.text}` at {Path(loc.file).name}:{block.start} decides per rank which"
                f" collective runs (around the call at line {loc.line}): move the collective out"
                " of it, or make the condition the same on every rank."
            )
        else:
            fix = (
                f"Find what sends {rank_label(ranks)} to the {ops or 'odd'}"
                f" call{where(first)} while the others run another collective (no"
                " rank-dependent `if` is around either call in the source): an early exit, an"
                " exception handler, or data-dependent control flow."
            )
        yield Finding(
            title=f"{rank_label(ranks)} in {ops or 'another collective'} while group "
            f"{point.group} waits in {normal.op.op if normal and normal.op else 'its collective'}",
            summary=f"Flight Recorder, group {point.group} ({plural(point.members, 'rank')}), stuck at "
            f"collective seq {point.seq}: {sides}."
            + (" The sides are the same size; check both call sites." if tie else ""),
            ranks=ranks,
            location=at,
            other_locations=[
                loc for loc in [location(first), location(normal)] if loc and loc != at
            ],
            confidence=round(confidence, 3),
            evidence=[item.id, *(point.side_evidence_id(s) for s in culprits)][:6],
            fix=f"Make every rank call the same collectives in the same order. {fix}",
            confirm=f"{rank_label(ranks)}'s recorded op at seq {point.seq} is "
            f"{ops or 'another op'} (see {point.evidence_id()})",
        )
