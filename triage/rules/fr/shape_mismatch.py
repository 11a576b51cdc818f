"""hang.shape_mismatch from Flight Recorder: one collective, different sizes or dtypes."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import coverage, location, ranks_of, split, stuck_groups, where
from triage.text import plural, rank_label


def _shape(side: object) -> str:
    op = getattr(side, "op", None)
    if op is None:
        return "?"
    sizes = ",".join("x".join(map(str, s)) or "scalar" for s in op.input_sizes) or "no tensors"
    dtypes = ",".join(sorted(set(op.input_dtypes)))
    return f"[{sizes}{' ' + dtypes if dtypes else ''}]"


@rule("fr.shape_mismatch", "hang.shape_mismatch")
def fr_shape_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: one collective at one sequence number, other sizes or dtypes on some members.

    What it detects:
    Aligned by collective sequence number, every member entered the same op, but the
    input/output sizes or dtypes recorded differ (uneven ops such as all_to_all, scatter
    and gather are compared only where their buffers must agree).

    Why it happens:
    A tensor whose shape depends on the rank's data (a last partial batch, variable
    sequence lengths, a padded vocabulary on some ranks), a dtype that differs
    (autocast on some ranks, a float64 buffer), or the wrong tensor passed on some ranks.
    NCCL then waits forever or corrupts memory; gloo may hang.

    Evidence:
    Flight Recorder dumps: input_sizes / input_dtypes of the stuck entry per rank.

    Fix:
    Make the tensor's shape and dtype identical on every rank at this call (pad to a
    fixed size, all_gather the sizes first, cast to one dtype), or use an op made for
    uneven sizes (all_gather_object, all_to_all_single with split sizes).

    Known false positives:
    Collectives that legitimately carry per-rank sizes are skipped; a custom backend that
    records other sizes than it sends could trip it.

    References:
    TORCH_DISTRIBUTED_DEBUG=DETAIL reports the same mismatch as an error.
    """
    for item, point in stuck_groups(evidence):
        normal, odd, tie = split(point, "other_shape")
        if not odd or normal is None:
            continue
        ranks = ranks_of(odd)
        first = odd[0]
        op = first.op.op if first.op else "the collective"
        yield Finding(
            title=f"{rank_label(ranks)} entered {op} with other sizes or dtypes",
            summary=f"Flight Recorder, group {point.group} ({plural(point.members, 'rank')}), stuck at "
            f"collective seq {point.seq}: {'; '.join(s.describe() for s in (normal, *odd))}."
            + (" The sides are the same size; check both." if tie else ""),
            ranks=ranks,
            location=location(first),
            other_locations=[loc for loc in [location(normal)] if loc],
            confidence=round((0.6 if tie else 0.85) * coverage(point), 3),
            evidence=[item.id, *(point.side_evidence_id(s) for s in odd)][:6],
            fix=f"Make the tensor passed to {op}{where(first)} the same shape and dtype on "
            "every rank (pad, or exchange sizes first).",
            confirm=f"{rank_label(ranks)}'s {op} at seq {point.seq} records "
            f"{_shape(first)} against {_shape(normal)} elsewhere",
        )
