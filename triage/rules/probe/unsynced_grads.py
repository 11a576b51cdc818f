"""wrong.unsynced_grads from probe snapshots: replicas whose gradients differ, or whose
parameters were identical at one call and differ at a later one."""

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
    modules,
    name_tensors,
    named,
    probe_view,
    ranks_phrase,
)
from triage.text import rank_label

_FIX = (
    "Reduce the gradients across replicas before every optimizer step: wrap the model in "
    "DistributedDataParallel (or FSDP / fully_shard) and call the wrapper, not "
    "model.module, in forward; under no_sync() (gradient accumulation) leave it for the "
    "last micro-batch; with a hand-written loop, all_reduce every parameter's .grad "
    "(average over the world size) after backward and before optimizer.step()."
)


@rule("probe.unsynced_grads", "wrong.unsynced_grads")
def unsynced_grads(evidence: EvidenceSet) -> Iterator[Finding]:
    """Gradients are not reduced across replicas, so the replicas drift apart.

    What it detects:
    Replicas of a parameter (every rank of a plain or DDP model; ranks that differ only on
    Replicate mesh dims of a DTensor) hold different gradients at a call, or hold
    parameters that were identical at an earlier call and differ now. Tensors whose
    difference NaN/Inf explains, and parameters missing a gradient on some ranks, are left
    to wrong.nan and wrong.unused_parameters.

    Why it happens:
    Each rank trains on its own batch; only a reduction (DDP, FSDP, an explicit
    all_reduce) makes their gradients equal. No wrapper, calling model.module (which
    skips DDP's hooks), a no_sync() context left on, or an all_reduce on a copy of the
    gradients leaves every replica stepping with its own gradient.

    Evidence:
    Replica checks (read_probe_snapshots): gradient checksums that differ among replicas,
    parameter checksums identical at an earlier call and different later, the wrappers
    around the model, the snapshot's user line.

    Fix:
    Wrap the model in DDP/FSDP and call the wrapper; end no_sync() before the last
    micro-batch; all_reduce the real .grad tensors before optimizer.step().

    Known false positives:
    A snapshot inside gradient accumulation under no_sync() sees unreduced gradients on
    purpose; snapshot after optimizer.step() instead. Parameters that drift while the
    gradients agree point at the update (an optimizer step on some ranks only, a
    rank-dependent learning rate) and are reported with less confidence.

    References:
    torch.nn.parallel.DistributedDataParallel (no_sync); torch.distributed.all_reduce.
    """
    view = probe_view(evidence)
    for index, (item, check) in enumerate(view.checks):
        unused = {d.name for d in diverging(check, "grad_presence")}
        grads = [d for d in diverging(check, "grad") if not d.nonfinite and d.name not in unused]
        drift = [
            d
            for d in diverging(check, "value")
            if not d.nonfinite and d.matched_at and d.name not in unused
        ]
        if (unused and view.reducing) or _reduced_later(view.checks[index + 1 :]):
            grads = []  # DDP's reducer waits for the missing gradients; or accumulation
        if not grads and not drift:
            continue
        shown = grads or drift
        ranks = culprits(shown)
        confidence = _confidence(check, grads, drift)
        if not view.reducing:
            confidence = min(0.95, confidence + 0.04)
        yield Finding(
            title=(
                f"gradients differ across replicas at {named(check.label)}: {name_tensors(grads)}"
                if grads
                else f"replicas drifted apart between {named(drift[0].matched_at)} and {named(check.label)}"
            ),
            summary=_summary(check, grads, drift, view.wrappers, view.reducing),
            ranks=ranks,
            location=view.location(check, ranks),
            confidence=round(confidence, 3),
            evidence=view.cite(item, check, ranks),
            fix=_FIX,
            confirm=f"the gradients of {shown[0].name} differ across {rank_label(ranks)} "
            "right after backward(), before optimizer.step()",
        )
        return
    yield from _after_steps(view)


def _after_steps(view: ProbeView) -> Iterator[Finding]:
    """Weights already different at a first snapshot taken after optimizer steps, with no
    gradients to compare: unreduced steps are as likely as different starting weights, so
    this rivals wrong.init_mismatch and the report says what tells them apart."""
    if not view.checks or not view.checks[0][1].first_call or not view.checks[0][1].stepped:
        return
    item, check = view.checks[0]
    found = [d for d in diverging(check, "value") if not d.nonfinite and not d.dtensor]
    if not found or check.ranks_with_grads:
        return
    ranks = culprits(found)
    yield Finding(
        title=f"replicas differ at {named(check.label)}, after the optimizer stepped",
        summary=f"{name_tensors(found, check.counts.get('value'))} differ across replicas at "
        f"the first snapshot ({named(check.label)}): {ranks_phrase(found)}; the optimizer had "
        "already stepped and no gradients were held to compare, so unreduced steps may have "
        "separated them.",
        ranks=ranks,
        location=view.location(check, ranks),
        confidence=0.5,
        evidence=view.cite(item, check, ranks),
        fix=_FIX,
        confirm=f"a snapshot before the first step shows {found[0].name} identical on every rank",
    )


def _reduced_later(later: list[tuple[Evidence, ReplicaCheck]]) -> bool:
    """Gradients that differ and agree again at a later call (the weights not drifting in
    between, or that call would have been reported): micro-batches under no_sync(), which
    DDP reduces at the last one. Snapshots between micro-batches see local gradients."""
    return any(c.ranks_with_grads > 1 and not c.counts.get("grad") for _, c in later)


def _confidence(
    check: ReplicaCheck, grads: list[TensorDivergence], drift: list[TensorDivergence]
) -> float:
    if grads:
        return 0.92 if drift else 0.88
    grads_agree = check.ranks_with_grads > 1 and not diverging(check, "grad")
    return 0.55 if grads_agree else 0.8


def _summary(
    check: ReplicaCheck,
    grads: list[TensorDivergence],
    drift: list[TensorDivergence],
    wrappers: list[str],
    reducing: bool,
) -> str:
    parts = []
    if grads:
        total = check.counts.get("grad", len(grads))
        parts.append(
            f"At {named(check.label)} the gradients of {name_tensors(grads, total)} (modules "
            f"{modules(grads)}) differ across replicas: {ranks_phrase(grads)}"
            f"{largest_diff(grads)}."
        )
    if drift:
        parts.append(
            f"Parameters {name_tensors(drift)} were identical at {named(drift[0].matched_at)} and "
            f"differ at {named(check.label)}: {ranks_phrase(drift)}{largest_diff(drift)}."
        )
    if grads and reducing:
        parts.append(
            f"The model is wrapped ({', '.join(wrappers)}), yet its gradients were not "
            "reduced: forward through model.module, no_sync() still on, or gradients "
            "changed after the reduction."
        )
    elif not reducing:
        parts.append("No DDP/FSDP wrapper reduces the gradients.")
    if not grads:
        agree = check.ranks_with_grads > 1 and not diverging(check, "grad")
        parts.append(
            "The gradients agree, so the update differs: an optimizer step on some ranks "
            "only, or a rank-dependent learning rate or optimizer state."
            if agree
            else "No gradients were held at the snapshot to compare."
        )
    return " ".join(parts)
