"""wrong.* from logs: results that change with the number of GPUs, pasted one per world size.

What moves names the candidates: an evaluated-sample count that grows with the ranks is a
sampler padding the dataset (wrong.eval_sharding); a metric that moves with the GPU count
is a learning rate or loss not scaled with the global batch (wrong.reduction_scaling) or
BatchNorm statistics computed per GPU (wrong.batchnorm_sync), ranked close: the text does
not tell these two apart, one rerun does.
"""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids, shows_failure
from triage.rules.logs._world_metrics import (
    WORLD_SIGNATURES,
    metric_moves,
    samples_move,
    shown,
)

_SEPARATE = (
    "rerun at the smallest and largest GPU count with the same global batch (per-GPU batch x"
    " GPUs) and the learning rate scaled with it: if the gap closes it was the scaling; if it"
    " stays and the model has BatchNorm, convert it with"
    " torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) and compare again"
)


@rule("logs.samples_by_world", "wrong.eval_sharding")
def samples_by_world(evidence: EvidenceSet) -> Iterator[Finding]:
    """The evaluated-sample count changes with the world size: the sampler pads the data.

    What it detects:
    Results pasted once per world size whose evaluated counts differ by fewer samples than
    the largest world size (`50000 samples processed -- world_size = 1`, `50004 samples
    processed -- world_size = 6`: generic.samples_per_world_size), in text without a failure.

    Why it happens:
    DistributedSampler gives every rank ceil(N / world_size) samples, repeating some to fill
    the last rank; an evaluation that sums over the ranks counts the repeats, so the count
    (and the metric, slightly) depends on the world size.

    Evidence:
    The lines with their world size and count.

    Fix:
    Evaluate every sample exactly once: drop the padded repeats after gathering (keep the
    first len(dataset) samples in dataset order), or evaluate on one rank.

    Known false positives:
    Runs on different data (another split or a filtered set) differ in count too; so does
    drop_last=True, which removes samples instead of repeating them.

    References:
    https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """
    padded = samples_move(evidence)
    if not padded or shows_failure(evidence, besides=WORLD_SIGNATURES):
        return
    counts = ", ".join(f"{s.fields['samples']} at {s.fields['gpus']}" for _, s in padded[:4])
    yield Finding(
        title="the evaluated-sample count changes with the world size: the sampler pads it",
        summary=f"The same evaluation counts {counts} (world size) in {shown(padded)}: a"
        " DistributedSampler rounds the dataset up to a multiple of the ranks by repeating"
        " samples, and the metric counts the repeats.",
        ranks=[],
        confidence=0.55,
        evidence=ids(padded[:8]),
        fix="Evaluate every sample exactly once: gather predictions with their dataset indices"
        " and keep the first len(dataset) in dataset order (the padded repeats come last), or"
        " run the evaluation on one rank.",
        confirm="the count at each world size is len(dataset) rounded up to a multiple of it",
    )


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
    moved = metric_moves(evidence)
    if not moved or samples_move(evidence) or shows_failure(evidence, besides=WORLD_SIGNATURES):
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
        confirm=_SEPARATE,
    )


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
    moved = metric_moves(evidence)
    if not moved or samples_move(evidence) or shows_failure(evidence, besides=WORLD_SIGNATURES):
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
        confirm=_SEPARATE,
    )
