"""wrong.eval_sharding from logs: distributed evaluation repeats samples or reports one shard."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import (
    Found,
    Signal,
    ids,
    ranks_of,
    signals,
    strongest,
    tracebacks,
)
from triage.text import rank_label

CRASH_CAP = 0.3

_SAMPLER_FIX = (
    "Evaluate every sample exactly once: run validate/test on one device "
    "(Trainer(devices=1, num_nodes=1)), or keep DDP but de-duplicate, e.g. gather per-sample "
    "ids and predictions and drop the padded repeats (DistributedSampler pads every rank to "
    "ceil(N / world_size) samples), or use torchmetrics metrics that sync their state."
)
_SYNC_FIX = (
    "Accumulate epoch metrics across ranks: self.log(name, value, sync_dist=True) (or a "
    "torchmetrics Metric object passed to self.log), so the logged value covers every rank's "
    "shard instead of rank 0's."
)
_SHARD_FIX = (
    "Give the evaluation loader a DistributedSampler(shuffle=False) as the training loader has"
    " (or evaluate on rank 0 alone), and reduce the per-rank sums across ranks before"
    " printing the metric."
)
_DROPPED_FIX = (
    "Evaluate every sample: give the evaluation loader drop_last=False (on the DataLoader and"
    " the DistributedSampler) and de-duplicate the padded repeats after gathering, or evaluate"
    " on one device."
)
_GATHER_FIX = (
    "Give the evaluation dataset a length (a map-style Dataset) so gather_for_metrics can drop "
    "the padded remainder, or drop the duplicates past len(dataset) yourself."
)


@rule("logs.eval_sharding", "wrong.eval_sharding")
def eval_sharding(evidence: EvidenceSet) -> Iterator[Finding]:
    """Distributed evaluation counts padded samples twice or logs only one rank's metric.

    What it detects:
    Lightning's `Using DistributedSampler with the dataloaders. During trainer.validate(),
    it is recommended to use Trainer(devices=1, num_nodes=1) to ensure each sample/batch gets
    evaluated exactly once` (and DeiT's and MAE's `Enabling distributed evaluation with an
    eval dataset not divisible by process number`), its `It is recommended to use self.log('val_acc', ...,
    sync_dist=True) when logging on epoch level in distributed setting`, and accelerate's
    `The used dataset had no length, returning gathered tensors. You should drop the
    remainder yourself.`; torchvision's reference scripts' count after evaluation (`It looks
    like the dataset has 50000 samples, but 50004 samples were used for the validation`,
    0.8: the count says it happened); and weaker (0.45), per-batch evaluation lines (`Test: [ 0/49] ...
    Loss 9.5338e-01 Acc@1 75.10`) that two or more processes print with the same batch
    counter and the same metric values: each evaluated the same batches, the whole set.

    Why it happens:
    DistributedSampler pads the dataset to a multiple of the world size by repeating
    samples, so gathered predictions count some twice; metrics logged without sync_dist are
    rank 0's shard only; an evaluation loader without a DistributedSampler gives every rank
    the whole set (N times the work, and metrics summed across ranks count it N times); all
    make distributed metrics differ from single-device ones.

    Evidence:
    The warnings, the stage (validate/test) and the metric names.

    Fix:
    Evaluate on one device or de-duplicate the gathered samples; log with sync_dist=True
    or torchmetrics; let gather_for_metrics drop the remainder.

    Known false positives:
    Lightning prints these warnings for every multi-device run; when the dataset size is a
    multiple of the world size and the metrics are synced, results are right anyway.

    References:
    torch.utils.data.distributed.DistributedSampler (drop_last, padding);
    LightningModule.log(sync_dist); accelerate Accelerator.gather_for_metrics.
    """
    sampler = signals(evidence, "eval.distributed_sampler", "eval.padded_warning")
    unsynced = signals(evidence, "eval.metric_not_synced")
    remainder = signals(evidence, "eval.gather_remainder")
    counted = signals(evidence, "eval.samples_mismatch")
    found: list[Found] = []
    if counted:
        dataset, used = counted[0][1].fields["dataset"], counted[0][1].fields["used"]
        padded = used > dataset
        found.append(
            (
                0.8,
                f"evaluation used {used} samples of a dataset of {dataset}: "
                + (
                    f"{used - dataset} padded repeats counted"
                    if padded
                    else f"{dataset - used} samples dropped"
                ),
                counted,
                _SAMPLER_FIX if padded else _DROPPED_FIX,
            )
        )
    if sampler:
        stages = sorted({s.fields["stage"] for _, s in sampler if s.fields.get("stage")})
        during = f" during {', '.join(stages)}" if stages else ""
        found.append(
            (
                0.65,
                f"evaluation{during} uses a DistributedSampler, which repeats samples to pad "
                "every rank",
                sampler,
                _SAMPLER_FIX,
            )
        )
    if unsynced:
        metrics = sorted({s.fields["metric"] for _, s in unsynced if s.fields.get("metric")})
        found.append(
            (
                0.6,
                f"epoch-level metric{'s' if len(metrics) > 1 else ''} {', '.join(metrics[:6])} "
                "logged without sync_dist: each rank reports its own shard",
                unsynced,
                _SYNC_FIX,
            )
        )
    if remainder:
        found.append(
            (
                0.6,
                "gather_for_metrics kept the padded remainder (the dataset has no length)",
                remainder,
                _GATHER_FIX,
            )
        )
    repeated = _repeated_batches(evidence)
    if repeated:
        step, steps = repeated[0][1].fields["step"], repeated[0][1].fields["steps"]
        found.append(
            (
                0.45,
                f"{len(repeated)} processes print the same evaluation batch {step}/{steps} with"
                " the same metrics: each evaluates the whole set, not its shard",
                repeated,
                _SHARD_FIX,
            )
        )
    if not found:
        return
    (confidence, what, items, fix), every = strongest(found)
    if len(found) > 1:
        confidence += 0.07
        fix = " ".join(f[3] for f in found)
    if tracebacks(evidence, dumps=False):
        # These warnings appear on every multi-device Lightning run: beside a crash they are
        # background, not the story.
        confidence = min(confidence, CRASH_CAP)
    ranks = ranks_of(s for _, s in every)
    on = f" ({rank_label(ranks)})" if ranks else ""
    others = "; ".join(f[1] for f in found if f[1] != what)
    yield Finding(
        title=what,
        summary=f"{what}{on}: `{items[0][1].text[:200]}`."
        + (f" Also: {others}." if others else ""),
        ranks=ranks,
        confidence=confidence,
        evidence=ids(every)[:12],
        fix=fix,
        confirm="the metric computed on one device (or over de-duplicated gathered sample ids) "
        "differs from the distributed one, and the gathered sample count exceeds len(dataset)",
    )


def _repeated_batches(evidence: EvidenceSet) -> list[Signal]:
    """Per-batch evaluation lines that two or more processes printed alike: the same batch
    counter and the same metric values. Sharded ranks evaluate different samples, so their
    losses differ; identical ones mean each rank evaluated the same batches. One rank
    repeating itself does not count, nor a line printed twice to one console (two logging
    handlers): the copies must come from different ranks or differ elsewhere (timings)."""
    groups: dict[tuple[object, ...], list[Signal]] = defaultdict(list)
    for item in signals(evidence, "eval.batch_metrics"):
        fields = item[1].fields
        if fields.get("metrics"):
            key = (fields["stage"], fields["step"], fields["steps"], fields["metrics"])
            groups[key].append(item)
    for items in groups.values():
        known = [s.rank for _, s in items if s.rank is not None]
        if len(set(known)) < len(known):
            continue
        if len(set(known)) >= 2 or len({s.text for _, s in items}) >= 2:
            return items
    return []
