"""wrong.reduction_scaling from logs: a metric pasted once per GPU count that moves with it
(ranked close to BatchNorm per GPU, logs.metric_by_world_batchnorm)."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids
from triage.rules.logs._world_metrics import SEPARATE, shown, unexplained_drift


@rule("logs.metric_by_world", "wrong.reduction_scaling")
def metric_by_world(evidence: EvidenceSet) -> Iterator[Finding]:
    """A metric that changes with the number of GPUs: the learning rate or the loss is not
    scaled with the global batch (or BatchNorm runs per GPU: logs.metric_by_world_batchnorm).

    What it detects:
    One metric pasted per GPU count (`1 gpu: 0.7729` ... `8 gpus: 0.5373`:
    generic.metric_per_world_size) that moves by more than 2% between the fewest and the
    most GPUs, in text without a failure and without a sample count that explains it
    (logs.samples_by_world).

    Why it happens:
    With DDP the global batch is per-GPU batch x GPUs: a learning rate tuned for one GPU,
    a warm-up counted in steps (fewer per epoch with more GPUs), a loss averaged per rank
    and then summed, or gradient accumulation left as it was all change the optimisation
    with the GPU count.

    Evidence:
    The lines with their world size and value.

    Fix:
    Scale the learning rate with the global batch (or keep the global batch fixed by
    lowering the per-GPU batch), count warm-up and schedules in samples or epochs, and average
    losses over the global batch.

    Known false positives:
    BatchNorm statistics per GPU move the metric with the GPU count too (ranked close by its
    own rule); so does a different number of epochs or steps per run.

    References:
    https://pytorch.org/docs/stable/notes/ddp.html
    """
    moved = unexplained_drift(evidence)
    if not moved:
        return
    yield Finding(
        title="a metric changes with the number of GPUs: the learning rate or loss may not"
        " scale with the global batch",
        summary=f"{shown(moved)}: the result moves with the world size, which a per-GPU"
        " quantity that should follow the global batch explains (the learning rate, a"
        " step-counted warm-up, a loss averaged per rank); BatchNorm statistics per GPU"
        " explain it as well.",
        ranks=[],
        confidence=0.3,
        evidence=ids(moved[:8]),
        fix="Scale the learning rate with the global batch (per-GPU batch x GPUs) or keep the"
        " global batch fixed across GPU counts, count warm-up and schedules in samples or"
        " epochs, and average the loss over the global batch.",
        confirm=SEPARATE,
    )
