"""wrong.batchnorm_sync from logs: a metric pasted once per GPU count that moves with it
(ranked just below the learning-rate scaling, logs.metric_by_world)."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids
from triage.rules.logs._world_metrics import SEPARATE, shown, unexplained_drift


@rule("logs.metric_by_world_batchnorm", "wrong.batchnorm_sync")
def metric_by_world_batchnorm(evidence: EvidenceSet) -> Iterator[Finding]:
    """A metric that changes with the number of GPUs: BatchNorm computes its statistics per
    GPU (or the scaling is off: logs.metric_by_world).

    What it detects:
    The same results per world size as logs.metric_by_world, ranked just below it.

    Why it happens:
    Plain BatchNorm under DDP normalises each GPU's share of the batch: with more GPUs each
    share is smaller and the statistics noisier, and its running statistics differ per
    rank, which hurts dense tasks with small per-GPU batches most.

    Evidence:
    The lines with their world size and value.

    Fix:
    torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before wrapping it in DDP (or
    broadcast_buffers and a larger per-GPU batch).

    Known false positives:
    A model without BatchNorm; a learning rate not scaled with the global batch moves the
    metric the same way (ranked just above).

    References:
    https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html
    """
    moved = unexplained_drift(evidence)
    if not moved:
        return
    yield Finding(
        title="a metric changes with the number of GPUs: BatchNorm may run per GPU",
        summary=f"{shown(moved)}: with plain BatchNorm each GPU normalises its own share of"
        " the batch, smaller with every GPU added; an unscaled learning rate explains the"
        " same numbers.",
        ranks=[],
        confidence=0.25,
        evidence=ids(moved[:8]),
        fix="Convert BatchNorm to SyncBatchNorm before wrapping the model in DDP:"
        " model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model).",
        confirm=SEPARATE,
    )
