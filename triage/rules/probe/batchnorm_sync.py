"""wrong.batchnorm_sync from probe snapshots: BatchNorm running statistics (buffers) that
differ across replicas while the parameters agree."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
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

_NORM_STATS = re.compile(r"(^|\.)(running_mean|running_var|num_batches_tracked)$")
_FIX = (
    "Synchronise the statistics: convert the model with "
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before wrapping it in DDP, so "
    "every rank normalises with, and records, the statistics of the global batch. DDP's "
    "broadcast_buffers=True (the default) only copies rank 0's buffers at each forward; "
    "with plain BatchNorm every rank still normalises with its own batch. Without DDP, "
    "all_reduce (average) the running statistics before evaluating or saving."
)


@rule("probe.batchnorm_sync", "wrong.batchnorm_sync")
def batchnorm_sync(evidence: EvidenceSet) -> Iterator[Finding]:
    """BatchNorm running statistics differ across replicas: BatchNorm is not synchronised.

    What it detects:
    Buffers named like BatchNorm statistics (running_mean, running_var,
    num_batches_tracked) whose checksums differ among replicas at a call, most telling
    when the parameters agree at that call; other buffers that differ, with less
    confidence.

    Why it happens:
    Plain BatchNorm normalises each rank's batch with that batch's own statistics and
    updates its running statistics from them, so replicas hold different statistics and
    normalise differently; evaluation and the saved checkpoint depend on which rank's
    statistics were kept. SyncBatchNorm reduces the statistics across ranks. DDP with
    broadcast_buffers=False never aligns buffers; with the default it copies rank 0's at
    each forward, and the forward's update makes them differ again.

    Evidence:
    Replica checks (read_probe_snapshots): the buffers that differ, the ranks, whether the
    parameters agree at the same call; the wrappers; the snapshot's user line.

    Fix:
    torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP; or average the
    statistics across ranks before evaluating and saving.

    Known false positives:
    Replicas whose parameters differ (unreduced gradients, different initial weights)
    also hold different statistics; that case is reported with little confidence, the
    parameter finding is the cause. Per-rank buffers by design (a rank's own RNG state or
    counters) differ too.

    References:
    torch.nn.SyncBatchNorm; DistributedDataParallel(broadcast_buffers=...).
    """
    view = probe_view(evidence)
    for item, check in view.checks:
        buffers = [d for d in diverging(check, "value", kind="buffer") if not d.nonfinite]
        if not buffers:
            continue
        stats = [d for d in buffers if _NORM_STATS.search(d.name)]
        params = [d for d in diverging(check, "value") if not d.nonfinite]
        shown = stats or buffers
        ranks = culprits(shown)
        if params:
            confidence = 0.45 if stats else 0.3
            agree = (
                f" The parameters differ too ({name_tensors(params)}), which alone makes the "
                "statistics differ: look at that first."
            )
        else:
            confidence = 0.8 if stats else 0.45
            agree = " The parameters agree, so only the normalisation state differs."
        ddp = [w for w in check.wrappers if "DistributedDataParallel" in w]
        wrapped = (
            " DDP's buffer broadcast does not keep them equal: each forward updates them "
            "from the rank's own batch."
            if ddp
            else ""
        )
        what = "BatchNorm statistics" if stats else "buffers"
        yield Finding(
            title=f"{what} differ across replicas at {named(check.label)}: {name_tensors(shown)}",
            summary=f"At {named(check.label)}, {what} {name_tensors(shown, len(shown))} (modules "
            f"{modules(shown)}) differ across replicas: {ranks_phrase(shown)}"
            f"{largest_diff(shown)}.{agree}{wrapped}",
            ranks=ranks,
            location=view.location(check, ranks),
            confidence=confidence,
            evidence=view.cite(item, check, ranks),
            fix=_FIX,
            confirm=f"after SyncBatchNorm.convert_sync_batchnorm, {shown[0].name} is identical "
            f"on {rank_label(ranks)} and the others",
        )
        return
