"""wrong.init_mismatch from probe snapshots: replicas that hold different weights from the
first snapshot on."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Evidence, Finding
from triage.observations import ReplicaCheck, TensorDivergence
from triage.registry import EvidenceSet, rule
from triage.rules.probe._replica_view import (
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
    "Start every replica from the same weights: seed every rank the same before building "
    "the model (torch.manual_seed(seed) on all ranks; offset seeds only for data and "
    "dropout), or broadcast rank 0's parameters and buffers after building and loading "
    "(DDP does this when it wraps the model, so load checkpoints and re-initialise before "
    "wrapping, not after), and load the same checkpoint on every rank."
)


@rule("probe.init_mismatch", "wrong.init_mismatch")
def init_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Replicas hold different weights already at the first snapshot: seed or broadcast missing.

    What it detects:
    At the first call read, parameters of a plain or DDP model differ across ranks
    (checksums of replicas differ, not from NaN/Inf), before any drift could be seen; the
    more so when no rank has run a backward yet, or when the gradients agree (reduced) while
    the weights differ.

    Why it happens:
    Each rank builds the model with its own random seed (the seed offset by rank, or none
    set), or loads a different checkpoint, or re-initialises or loads weights after DDP
    wrapped the model (DDP broadcasts rank 0's parameters only at construction). The
    replicas then train different models, even when every gradient is reduced.

    Evidence:
    The first replica check (read_probe_snapshots): parameter checksums that differ, the
    ranks that disagree with the majority, whether gradients exist and agree; the
    snapshot's user line.

    Fix:
    Seed every rank the same before building the model, or broadcast rank 0's state after
    building and loading; load checkpoints before wrapping in DDP.

    Known false positives:
    When the first snapshot read was taken after training steps, replicas that drifted
    apart (unreduced gradients) look the same; later calls and the gradients tell them
    apart, and wrong.unsynced_grads is reported too. Manually sharded (tensor-parallel)
    weights kept as plain tensors differ by design.

    References:
    torch.manual_seed; torch.distributed.broadcast; DDP's init-time parameter broadcast
    (torch.nn.parallel.DistributedDataParallel).
    """
    view = probe_view(evidence)
    if not view.checks or not view.checks[0][1].first_call:
        return
    item, check = view.checks[0]
    found = [d for d in diverging(check, "value") if not d.nonfinite and not d.dtensor]
    if not found:
        return
    ranks = culprits(found)
    confidence, why = _weigh(check)
    later = _still(view.checks[1:], found)
    wrapped = (
        " DDP broadcasts rank 0's weights when it wraps the model, so these were changed "
        "after wrapping (a per-rank checkpoint load or re-initialisation)."
        if any("DistributedDataParallel" in w for w in check.wrappers)
        else ""
    )
    total = check.counts.get("value", len(found))
    yield Finding(
        title=f"replicas start from different weights: {name_tensors(found)} differ at "
        f"{named(check.label)}",
        summary=f"Already at the first snapshot ({named(check.label)}), {name_tensors(found, total)} "
        f"(modules {modules(found)}) differ across replicas: {ranks_phrase(found)}"
        f"{largest_diff(found)}. {why}{later}{wrapped} A seed or a broadcast is missing.",
        ranks=ranks,
        location=view.location(check, ranks),
        confidence=confidence,
        evidence=view.cite(item, check, ranks),
        fix=_FIX,
        confirm=f"a snapshot right after the model is built (before any step) shows "
        f"{found[0].name} differing on {rank_label(ranks)}",
    )


def _weigh(check: ReplicaCheck) -> tuple[float, str]:
    """How sure: before any step, or reduced gradients with different weights, is direct."""
    grads_differ = any(not d.nonfinite for d in diverging(check, "grad"))
    grads_agree = check.ranks_with_grads > 1 and not grads_differ
    if check.call > 0:
        return (
            0.6,
            f"Calls before {named(check.label)} were not read, so they may have drifted earlier.",
        )
    if grads_agree:
        return 0.85, "The gradients agree (reduced), so no step separated them: they started apart."
    if grads_differ:
        return 0.65, "The gradients differ too, so unreduced steps may also have separated them."
    if check.stepped is False:
        return 0.9, "The optimizer holds no state yet: no step has run."
    if check.stepped:
        return 0.6, "The optimizer already stepped, so they may have drifted in those steps."
    return 0.8, "No rank holds a gradient, so no step since the last zero_grad separated them."


def _still(checks: list[tuple[Evidence, ReplicaCheck]], found: list[TensorDivergence]) -> str:
    names = {d.name for d in found}
    last = None
    for _, check in checks:
        if any(d.name in names for d in diverging(check, "value")):
            last = check.label
    return f" They still differ at {named(last)}." if last else ""
