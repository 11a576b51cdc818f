"""wrong.unknown from logs: the text holds the job's metrics or printed values and nothing
that failed."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import LogFile
from triage.readers.metric_lines import metric_in, values_in
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import shows_failure, signals


@rule("logs.metrics_only", "wrong.unknown", without_failure=True)
def metrics_only(evidence: EvidenceSet) -> Iterator[Finding]:
    """The text shows training or evaluation metrics and no failure: the numbers are the issue.

    What it detects:
    A log whose last lines hold a metric (`loss: 1.44 | grad_norm: 4.73`, `Acc@1 69.76`, `Mean
    SISNR is 6.2`, COCO's `Average Precision (AP) ... = 0.356`) or other values a program
    printed (a tensor, a row of a results table that is mostly
    numbers; not in text with NCCL's lines, whose channel lists and nccl-tests' tables are
    rows of numbers too), in text without a traceback, an error, a timeout or any other
    failure line.

    Why it happens:
    Numbers pasted on their own are what a person shows when the run finished but its
    results look wrong: a loss that does not fall like the single-GPU run, a metric that
    moves with the GPU count, a gradient norm out of range. In a distributed job the usual
    causes are a learning rate or loss not scaled with the global batch, evaluation over
    padded or duplicated samples, BatchNorm statistics per GPU, one seed or one data stream
    on every rank, and replicas or shards that drifted apart.

    Evidence:
    The log and its last line.

    Fix:
    Separate the candidates: rerun at two GPU counts with the same global batch and learning
    rate; count the evaluated samples against the dataset's size; compare replicas, batch
    statistics and the first batch of each rank (`triage.probe`: check_replicas, snapshot).

    Known false positives:
    A job that stopped printing (a hang) after its last metric line reads the same from its
    text alone; `triage hang` on the running job tells them apart. Every other rule's finding
    outranks this one.

    References:
    https://pytorch.org/docs/stable/notes/ddp.html
    """
    if shows_failure(evidence):
        return
    # NCCL's own lines and nccl-tests' tables are rows of numbers too: only a metric counts
    printed = metric_in if _nccl_lines(evidence) else values_in
    ending = [
        (item, line)
        for item, log in evidence.payloads(LogFile)
        for line in reversed(log.tail or [log.last_line])
        if printed(line)
    ]
    if not ending:
        return
    shown = ending[0][1].strip()[:120]
    yield Finding(
        title="metrics without a failure: the results themselves look wrong",
        summary=f"The text holds the job's metrics (`{shown}`) and no failure line: if these"
        " numbers are the problem, the cause is a per-GPU computation that should be global,"
        " and the text alone does not say which.",
        ranks=[],
        confidence=0.12,
        evidence=list(dict.fromkeys(item.id for item, _ in ending))[:8],
        fix="Separate the candidates: rerun at two GPU counts with the same global batch and"
        " learning rate (a learning rate or loss not scaled with it), count the evaluated"
        " samples against the dataset (sampler padding), check SyncBatchNorm, and compare"
        " replicas and each rank's first batch (`triage.probe`: check_replicas, snapshot).",
        confirm="if the job stopped printing rather than printing wrong numbers, it is a hang:"
        " run `triage hang` on it",
    )


def _nccl_lines(evidence: EvidenceSet) -> bool:
    return any(s.signature.startswith("nccl.") for _, s in signals(evidence))
