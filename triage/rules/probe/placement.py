"""wrong.placement from probe snapshots: DTensor placements that differ across ranks or do
not fit the mesh and shapes, copies declared Replicate that differ, Partial parameters."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Evidence, Finding
from triage.observations import ReplicaCheck, TensorDivergence
from triage.registry import EvidenceSet, rule
from triage.rules.probe._replica_view import (
    ProbeView,
    culprits,
    diverging,
    largest_diff,
    name_tensors,
    named,
    probe_view,
    ranks_phrase,
)
from triage.text import format_ranks

_FIX = (
    "Give every rank the same parallelize plan and mesh: call parallelize_module / "
    "distribute_tensor with one plan on all ranks (no rank-dependent styles), shard the "
    "dim the layer splits (ColwiseParallel: Shard(0) of nn.Linear's weight, RowwiseParallel: "
    "Shard(1)), build DTensors from local shards with DTensor.from_local(local, mesh, "
    "placements, run_check=True) and the placements the local tensors really have "
    "(Shard for pieces, Partial for unreduced sums, Replicate only for identical copies), "
    "and redistribute Partial results to Replicate before they are used as parameters."
)


@rule("probe.placement", "wrong.placement")
def placement(evidence: EvidenceSet) -> Iterator[Finding]:
    """DTensor placements are wrong: they differ across ranks, do not fit the mesh, or lie.

    What it detects:
    For one tensor, placements that differ across ranks (or the mesh they refer to);
    placements that do not fit their mesh (one per mesh dim), their tensor (a Shard dim
    past its last dim) or the local shard (a local shape other than the split of the global
    shape the placements imply); a DTensor whose copies on ranks that differ only on
    Replicate mesh dims hold different data at the first snapshot; parameters held as
    Partial (an unreduced sum).

    Why it happens:
    A parallelize plan applied differently per rank, ColwiseParallel and RowwiseParallel
    swapped, a mesh dim mixed up (dp vs tp), DTensor.from_local with run_check=False and
    placements that do not describe the local tensors (shards or partial sums declared
    Replicate), or a Partial result never redistributed.

    Evidence:
    Replica checks (read_probe_snapshots): the placements per rank, the mesh, local and
    global shapes, the checksums of Replicate copies; the snapshot's user line.

    Fix:
    One plan and mesh on all ranks; placements that describe the local tensors; from_local
    with run_check=True; redistribute Partial to Replicate.

    Known false positives:
    Uneven custom sharding (_StridedShard, hand-built local shapes) is not checked against
    the shape; Replicate copies that drift apart later (unreduced gradients on the
    replicate dim) are left to wrong.unsynced_grads.

    References:
    torch.distributed.tensor (DTensor, Shard, Replicate, Partial, from_local);
    torch.distributed.tensor.parallel (ColwiseParallel, RowwiseParallel).
    """
    view = probe_view(evidence)
    found: list[tuple[float, Evidence, ReplicaCheck, list[TensorDivergence], str]] = []
    for item, check in view.checks:
        wrong = diverging(check, "placements", kind=None)
        if wrong:
            found.append((0.9, item, check, wrong, _describe_wrong(check, wrong)))
            break
    if view.checks and view.checks[0][1].first_call:
        item, check = view.checks[0]
        lying = [d for d in diverging(check, "value", kind=None) if d.dtensor and not d.nonfinite]
        if lying:
            found.append((0.75, item, check, lying, _describe_lying(check, lying)))
    for item, check in view.checks:
        if check.partial:
            found.append((0.5, item, check, [], _describe_partial(check)))
            break
    if not found:
        return
    confidence, item, check, items, summary = max(found, key=lambda f: f[0])
    ranks = culprits(items) if items else check.ranks
    names = name_tensors(items) if items else ", ".join(check.partial)
    first = items[0].name if items else check.partial[0]
    yield Finding(
        title=f"wrong DTensor placement of {names} at {named(check.label)}",
        summary=summary,
        ranks=ranks,
        location=view.location(check, ranks),
        confidence=confidence,
        evidence=_cite(view, found),
        fix=_FIX,
        confirm=f"the placements and local shapes of {first} printed on rank "
        f"{format_ranks(ranks)} do not describe the data each rank holds",
    )


def _describe_wrong(check: ReplicaCheck, items: list[TensorDivergence]) -> str:
    first, rest = items[0], items[1:]
    total = check.counts.get("placements", len(items)) - 1
    same = f" The same for {name_tensors(rest, total)}." if rest else ""
    return f"At {named(check.label)}, {first.name}: {first.detail}; {ranks_phrase([first])}.{same}"


def _describe_lying(check: ReplicaCheck, items: list[TensorDivergence]) -> str:
    return (
        f"At the first snapshot ({named(check.label)}), DTensors {name_tensors(items)} differ among "
        f"ranks that should hold identical copies (they differ only on Replicate mesh dims): "
        f"{ranks_phrase(items)}{largest_diff(items)}. The local tensors are not replicas: "
        "shards or partial sums declared Replicate (from_local without run_check), or "
        "replicas initialised differently."
    )


def _describe_partial(check: ReplicaCheck) -> str:
    return (
        f"At {named(check.label)}, {', '.join(check.partial)} are held as Partial: each rank holds "
        "a summand, not the value, until a redistribute reduces it."
    )


def _cite(
    view: ProbeView, found: list[tuple[float, Evidence, ReplicaCheck, list[TensorDivergence], str]]
) -> list[str]:
    ids: list[str] = []
    for _, item, check, items, _ in sorted(found, key=lambda f: -f[0]):
        ids += [i for i in view.cite(item, check, culprits(items)) if i not in ids]
    return ids
