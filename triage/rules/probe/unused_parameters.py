"""wrong.unused_parameters from probe snapshots: trainable parameters with no gradient on
ranks that ran a backward."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Evidence, Finding
from triage.observations import ReplicaCheck, TensorDivergence
from triage.registry import EvidenceSet, rule
from triage.rules.probe._replica_view import (
    ProbeView,
    culprits,
    diverging,
    modules,
    name_tensors,
    named,
    probe_view,
)
from triage.text import plural, rank_label, rank_subject

_FIX = (
    "Make every trainable parameter take part in the loss on every rank and every step "
    "(return all outputs of forward, do not skip a branch on some ranks), or construct DDP "
    "with find_unused_parameters=True (slower); set requires_grad=False on parameters that "
    "are never trained, before wrapping."
)


@rule("probe.unused_parameters", "wrong.unused_parameters")
def unused_parameters(evidence: EvidenceSet) -> Iterator[Finding]:
    """Trainable parameters got no gradient on some ranks (or on every rank) in a backward.

    What it detects:
    In one call's snapshots, a parameter with requires_grad=True has no .grad on ranks that
    hold gradients of other parameters (so a backward ran there since zero_grad), while
    other ranks hold its gradient; or no rank holds it.

    Why it happens:
    The parameter did not contribute to the loss on those ranks: a module used only on
    some ranks or some batches (a rank-dependent branch, an auxiliary head, outputs dropped
    before the loss). DDP all-reduces gradients in buckets as they become ready; a
    parameter that never becomes ready on a rank leaves its bucket unreduced, so DDP fails
    at the next iteration (`Expected to have finished reduction in the prior iteration`)
    or the ranks hang; without DDP the replicas silently drift apart.

    Evidence:
    Replica checks (read_probe_snapshots): the parameters, the ranks without gradient and
    the ranks with one; the wrappers (DistributedDataParallel); the snapshot's user line.

    Fix:
    Use every parameter in the loss on every rank, or find_unused_parameters=True; freeze
    parameters that are never trained.

    Known false positives:
    A snapshot taken between a partial zero_grad and the backward, or inside gradient
    accumulation that skips modules on purpose; parameters unused on every rank are often
    harmless without DDP, so that case is reported with less confidence.

    References:
    torch.nn.parallel.DistributedDataParallel (find_unused_parameters, static_graph);
    TORCH_DISTRIBUTED_DEBUG=INFO names the parameters that did not receive grad.
    """
    view = probe_view(evidence)
    everywhere: tuple[Evidence, ReplicaCheck, list[TensorDivergence]] | None = None
    for item, check in view.checks:
        found = diverging(check, "grad_presence")
        some = [d for d in found if d.agreeing]
        if some:
            yield _finding(view, item, check, some, everywhere=False)
            return
        if found and everywhere is None:
            everywhere = (item, check, found)
    if everywhere is not None:
        yield _finding(view, *everywhere, everywhere=True)


def _finding(
    view: ProbeView,
    item: Evidence,
    check: ReplicaCheck,
    found: list[TensorDivergence],
    everywhere: bool,
) -> Finding:
    ddp = any("DistributedDataParallel" in w for w in check.wrappers)
    kept = diverging(check, "grad_presence")
    unlisted = check.counts.get("grad_presence", len(kept)) - len(kept)
    names = name_tensors(found, len(found) + (unlisted if len(found) == len(kept) else 0))
    ranks = culprits(found)
    if everywhere and check.missing:
        title = f"{names} got no gradient on {rank_label(ranks)} at {named(check.label)}"
        where = (
            f"on {rank_label(ranks)}, and {rank_label(check.missing)} left no "
            f"snapshot at {named(check.label)} (it did not get past the step)"
        )
        confidence = 0.8 if ddp else 0.6
    elif everywhere:
        title = f"{names} got no gradient on any rank at {named(check.label)}"
        where = f"on every rank that ran a backward ({plural(check.ranks_with_grads, 'rank')})"
        confidence = 0.6 if ddp else 0.4
        if ddp and check.counts.get("grad"):  # the reducer stopped short: nothing reduced
            where += " (and the other gradients differ across replicas, so DDP reduced none)"
            confidence = 0.85
    else:
        having = sorted({r for d in found for r in d.agreeing} - set(ranks))
        title = f"{names} got no gradient on {rank_label(ranks)} at {named(check.label)}"
        where = f"on {rank_label(ranks)}, while {rank_subject(having, 'hold')} one"
        confidence = 0.85 if ddp else 0.75
    wrapped = (
        " The model is wrapped in DistributedDataParallel: without find_unused_parameters=True "
        "its reducer waits for these gradients, so the next iteration fails or hangs."
        if ddp
        else " No DDP wrapper reduces gradients here, so these parameters drift apart."
        if not everywhere
        else ""
    )
    return Finding(
        title=title,
        summary=f"At {named(check.label)}, trainable parameters {names} (modules {modules(found)}) "
        f"have no .grad {where}: they took no part in the loss there.{wrapped}",
        ranks=ranks,
        location=view.location(check, ranks),
        confidence=confidence,
        evidence=view.cite(item, check, ranks),
        fix=_FIX,
        confirm=f"TORCH_DISTRIBUTED_DEBUG=INFO names {found[0].name} among the parameters "
        f"that did not receive grad on {rank_label(ranks)}",
    )
