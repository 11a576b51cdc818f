"""wrong.unknown from logs: results that should match do not, cause not named."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, signals
from triage.rules.logs._world_metrics import metric_moves, shown


@rule("logs.wrong_markers", "wrong.unknown")
def wrong_markers(evidence: EvidenceSet) -> Iterator[Finding]:
    """Results that should match do not, and no rule names why.

    What it detects:
    A failed numerical comparison (torch.testing's "Tensor-likes are not close!" with its
    mismatched elements, numpy's "Arrays are not equal"); or one metric reported for
    several numbers of GPUs (`1 gpu: 0.7729`, `8 gpus: 0.5373`) that moves with the count.

    Why it happens:
    A result that depends on the world size comes from something computed per GPU that
    should be global: BatchNorm statistics without SyncBatchNorm, a loss or learning rate
    not scaled with the global batch, evaluation over padded or duplicated samples, the same
    seed (same augmentations, same dropout) on every rank, or replicas that drifted apart.

    Evidence:
    generic.values_differ or generic.metric_per_world_size lines.

    Fix:
    Separate the candidates: compare replicas and batch statistics across ranks with
    `triage.probe` (`probe.check_replicas(model)`, `probe.snapshot(...)`), check the
    evaluation sampler's padding, and rerun at two GPU counts with the same global batch
    and learning rate.

    Known false positives:
    Small drift between GPU counts is expected (a different global batch, reduction order);
    below 2% it is ignored. A rule that names the cause outranks this one.

    References:
    https://pytorch.org/docs/stable/notes/ddp.html
    """
    differ = signals(evidence, "generic.values_differ")
    drift = metric_moves(evidence)
    if not differ and not drift:
        return
    seen = f"`{differ[0][1].text[:120]}`" if differ else shown(drift)
    what = "a comparison of results failed" if differ else "the metric moves with the GPU count"
    ranks = ranks_of(s for _, s in differ)
    yield Finding(
        title=f"results differ where they should match: {what}",
        summary=f"The text shows results that should agree and do not ({seen}), without the"
        " lines that say which per-GPU computation makes them differ.",
        ranks=ranks,
        confidence=0.2,
        evidence=[e.id for e, _ in differ + drift][:8],
        fix="Separate the candidates: BatchNorm without SyncBatchNorm, a loss or learning rate"
        " not scaled with the global batch, evaluation over padded samples, one seed on every"
        " rank, replicas that drifted. Compare replicas and batch statistics across ranks"
        " (`triage.probe`: check_replicas, snapshot) and rerun at two GPU counts with the"
        " same global batch.",
        confirm="the same global batch and learning rate give the same metric at two GPU counts",
    )
