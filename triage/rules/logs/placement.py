"""wrong.placement from logs: a DTensor's placements are not the ones the op expects."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._signals import ids, ranks_of, signals

_FIX = (
    "Make the placements agree with what the op and the parallel plan assume: check the "
    "plan's input/output layouts (ColwiseParallel's output is Shard(-1), RowwiseParallel's "
    "Partial before its reduction), redistribute explicitly where they meet, keep "
    "use_local_output consistent, and give uneven shards their true sizes; print "
    "`tensor.placements` on each side of the failing op to find the first mismatch."
)


@rule("logs.placement", "wrong.placement")
def placement(evidence: EvidenceSet) -> Iterator[Finding]:
    """An error names a DTensor placement that differs from the one expected.

    What it detects:
    Two placements compared on one line (`placements (Shard(dim=0),) but ... expects
    (Partial(sum),)`, `Replicate() vs Shard(0)`), or an exception whose message is about a
    DTensor's placements (`ValueError: ... DTensor has placements (Shard(dim=0),),`).

    Why it happens:
    A tensor-parallel plan whose layouts do not chain (a module's output placement is not
    the next one's input), a sharding strategy missing for an op so DTensor falls back to
    another placement, `use_local_output` mixing plain tensors with DTensors, or uneven
    shards treated as even. Results are wrong or the op refuses to run.

    Evidence:
    The placement the tensor has and, when the line says, the one expected.

    Fix:
    Align the plan's layouts, redistribute explicitly where they meet, keep uneven shard
    sizes.

    Known false positives:
    A line that quotes two placements while describing an intended redistribution.

    References:
    torch.distributed.tensor (DTensor placements); torch.distributed.tensor.parallel.
    """
    found = [
        (e, s)
        for e, s in signals(evidence, "dtensor.placement_mismatch")
        if "has" in s.fields or s.fields.get("got") != s.fields.get("want")
    ]
    if not found:
        return
    fields = found[0][1].fields
    compared = "got" in fields
    what = (
        f"a DTensor is {fields['got']} where {fields['want']} is expected"
        if compared
        else f"an error about a DTensor placed as {fields.get('has')}"
    )
    ranks = ranks_of(s for _, s in found)
    yield Finding(
        title="a DTensor's placement is not the one the op expects",
        summary=f"{what[0].upper()}{what[1:]}: `{found[0][1].text[:200]}`",
        ranks=ranks,
        location=comm_view(evidence).location(ranks),
        confidence=0.7 if compared else 0.55,
        evidence=ids(found)[:8],
        fix=_FIX,
        confirm="print `t.placements` of the op's inputs and output on one rank: one side "
        "differs from the plan's layout",
    )
