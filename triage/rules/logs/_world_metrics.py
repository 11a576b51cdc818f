"""Results printed once per world size: `1 gpu: 0.7729` ... `8 gpus: 0.5373`, `Acc@1
69.760, 50004 samples processed -- world_size = 6`.

A person who suspects the distributed setup runs the job at several GPU counts and pastes
what each printed. What moves with the count says which per-GPU computation should have
been global: the evaluated-sample count (a sampler that pads), or the metric itself (a
learning rate or loss not scaled with the global batch, BatchNorm statistics per GPU).
"""

from __future__ import annotations

from triage.registry import EvidenceSet
from triage.rules.logs._signals import Signal, shows_failure, signals

#: A metric that moves less than this share between GPU counts is noise, not a finding.
DRIFT = 0.02
_WORLD_SIGNATURES = frozenset({"generic.metric_per_world_size", "generic.samples_per_world_size"})


#: The rerun that tells an unscaled learning rate from BatchNorm per GPU.
SEPARATE = (
    "rerun at the smallest and largest GPU count with the same global batch (per-GPU batch x"
    " GPUs) and the learning rate scaled with it: if the gap closes it was the scaling; if it"
    " stays and the model has BatchNorm, convert it with"
    " torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) and compare again"
)


def samples_move(evidence: EvidenceSet) -> list[Signal]:
    """Evaluated counts that differ across world sizes by fewer samples than the largest
    world size: one dataset, padded to a multiple of the ranks."""
    found = signals(evidence, "generic.samples_per_world_size")
    counts = {s.fields["samples"] for _, s in found}
    worlds = {s.fields["gpus"] for _, s in found}
    if len(counts) < 2 or len(worlds) < 2:
        return []
    return found if max(counts) - min(counts) < max(worlds) else []


def metric_moves(evidence: EvidenceSet) -> list[Signal]:
    """One metric per GPU count, when it spans two counts and moves between them."""
    by_count = {
        s.fields["gpus"]: (e, s) for e, s in signals(evidence, "generic.metric_per_world_size")
    }
    if len(by_count) < 2:
        return []
    low, high = by_count[min(by_count)][1], by_count[max(by_count)][1]
    a, b = float(low.fields["value"]), float(high.fields["value"])
    if abs(a - b) <= DRIFT * max(abs(a), abs(b), 1e-12):
        return []
    return [by_count[n] for n in sorted(by_count)]


def padded_counts(evidence: EvidenceSet) -> list[Signal]:
    """`samples_move`'s lines, in text that shows no failure besides the results."""
    padded = samples_move(evidence)
    return padded if padded and not shows_failure(evidence, besides=_WORLD_SIGNATURES) else []


def unexplained_drift(evidence: EvidenceSet) -> list[Signal]:
    """`metric_moves`' lines, in text that shows no failure besides the results and no
    sample count that explains the drift (`padded_counts`)."""
    moved = metric_moves(evidence)
    if not moved or samples_move(evidence) or shows_failure(evidence, besides=_WORLD_SIGNATURES):
        return []
    return moved


def shown(found: list[Signal]) -> str:
    """The lines, quoted: `1 gpu: 0.7729`; `8 gpus: 0.5373`."""
    return "; ".join(f"`{s.text.strip()[:80]}`" for _, s in found[:4])
