"""hang.uneven_inputs from logs: ranks ran different numbers of collectives (steps)."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding, Location
from triage.observations import RankActivity
from triage.registry import EvidenceSet, rule
from triage.rules.logs._hang_lines import Split, hang_log, positions_text
from triage.rules.logs._signals import ids, ranks_of, signals
from triage.rules.logs._trace_split import finished_side, skipped_call
from triage.rules.stacks._hang_view import or_skipped
from triage.text import rank_label, rank_subject

_FIX = (
    "Give every rank the same number of steps: DistributedSampler(drop_last=True) or a "
    "dataset size divisible by the world size, agree on the step count with an "
    "all_reduce(MIN) before the loop, or wrap the loop in "
    "torch.distributed.algorithms.Join for genuinely uneven inputs."
)


@rule("logs.uneven_inputs", "hang.uneven_inputs")
def uneven_inputs(evidence: EvidenceSet) -> Iterator[Finding]:
    """Some ranks are several collectives behind or ahead of the rest, or already exiting.

    What it detects:
    Per-rank positions (DETAIL fingerprint sequence numbers, watchdog work numbers, NCCL
    opCounts) where the minority stands two or more collectives away from the majority,
    typically in another op (a final barrier, an evaluation gather) while the others are
    still in the training loop's all-reduce; or a rank's stack dump in
    destroy_process_group or at exit while other ranks time out. DDP's Join saying so
    itself: `Detected at least one rank that exhausted inputs. Throwing across all ranks.`
    (0.8).

    Why it happens:
    Ranks got different numbers of batches: a dataset split without DistributedSampler,
    `drop_last=False` with a size not divisible by the world size, per-rank filtering or
    bucketing, an early `break` on one rank. The rank that runs out first leaves the loop.

    Evidence:
    The gap between the minority's and the majority's collective numbers; the op each
    side is in; the exiting rank's dump.

    Fix:
    DistributedSampler(drop_last=True), an all-reduced step count, or DDP's Join.

    Known false positives:
    A rank-dependent block that skips several collectives looks the same from the
    numbers alone (hang.mismatched_collective); the source around the culprit's line
    tells them apart.

    References:
    torch.distributed.algorithms.Join; torch.utils.data.DistributedSampler.
    """
    exhausted = signals(evidence, "hang.join_exhausted")
    if exhausted:
        ranks = sorted({int(s.fields["rank"]) for _, s in exhausted if s.fields.get("rank")})
        who = rank_label(ranks) if ranks else "a rank"
        yield Finding(
            title=f"{who} ran out of inputs before the others (DDP's Join)",
            summary=f"`{exhausted[0][1].text.strip()[:160]}`: Join(throw_on_early_termination="
            f"True) found {who} out of batches while the others still had some, and raised on"
            " every rank: the ranks were given different numbers of batches.",
            ranks=ranks or ranks_of(s for _, s in exhausted),
            confidence=0.8,
            evidence=ids(exhausted)[:12],
            fix=_FIX,
            confirm="each rank's number of batches (len(dataloader)) differs",
        )
        return
    view = hang_log(evidence)
    traced = view.traced
    sides = finished_side(traced) if traced is not None else None
    if traced is not None and traced.majority is not None and sides is not None:
        finished, running = sides
        skip = skipped_call(traced)
        also = or_skipped(skip[2], skip[3]) if skip else ""
        yield Finding(
            title=f"{finished.label} left the training loop while {running.label} did not",
            summary=(
                f"The timed-out collectives' tracebacks put {finished.label} after the loop, in "
                f"{finished.where()}, while {running.label} still "
                f"{running.verb('wait')} inside it, in {running.where()}: the ranks "
                f"ran different numbers of steps.{also}"
            ),
            ranks=traced.culprit.ranks,
            location=traced.culprit.location,
            other_locations=[loc for loc in [traced.majority.location] if loc],
            confidence=0.5 if skip else 0.8,
            evidence=finished.evidence[:3] + running.evidence[:3],
            fix=_FIX,
            confirm=f"{finished.label} logged fewer training steps than the others",
        )
        return
    apart = [s for s in view.splits if s.how != "shape" and s.gap is not None and s.gap >= 2]
    if apart:
        best = max(apart, key=_confidence)
        yield _from_split(best, view.location(best.ranks), _confidence(best))
        return
    if not view.waiting:
        return
    exiting = [
        (item, state)
        for item, state in view.stacks
        if state.activity is RankActivity.exiting
        and state.rank is not None
        and state.rank not in view.waiting
    ]
    if exiting:
        ranks = sorted({s.rank for _, s in exiting if s.rank is not None})
        state = exiting[0][1]
        yield Finding(
            title=f"{rank_subject(ranks, 'are')} exiting while the other ranks wait",
            summary=(
                f"{rank_label(ranks).capitalize()}'s stack is in {state.op or 'process exit'}, past the "
                f"training loop, while {rank_label(sorted(view.waiting))} timed out in a "
                "collective: the ranks ran different numbers of steps."
            ),
            ranks=ranks,
            location=state.user_frame.location() if state.user_frame else None,
            confidence=0.55,
            evidence=[item.id for item, _ in exiting[:4]]
            + [i for ids in view.waiting.values() for i in ids][:4],
            fix=_FIX,
            confirm=f"{rank_label(ranks)} logged fewer training steps than the others",
        )


def _confidence(split: Split) -> float:
    ops = {p.op for p in split.culprits} | {p.op for p in split.majority}
    confidence = 0.65 if len({op for op in ops if op}) > 1 else 0.55
    return round(confidence * (1.0 if split.decided else 0.85), 3)


def _from_split(split: Split, location: Location | None, confidence: float) -> Finding:
    culprits = rank_label(split.ranks)
    return Finding(
        title=f"{rank_subject(split.ranks, 'are')} {split.gap} collectives away from the other "
        "ranks",
        summary=(
            f"The {split.ledger.label} put {positions_text(split.culprits)} and "
            f"{positions_text(split.majority) or 'the others elsewhere'}: "
            f"{split.gap} collectives apart, whole steps rather than one skipped call, so the "
            "ranks ran different numbers of steps and one side left the loop."
        ),
        ranks=split.ranks,
        location=location,
        confidence=confidence,
        evidence=split.evidence[:8],
        fix=_FIX,
        confirm=(
            f"{culprits} logged a different number of steps, or "
            + ("its stack is" if len(split.ranks) == 1 else "their stacks are")
            + " past the training loop"
        ),
    )
