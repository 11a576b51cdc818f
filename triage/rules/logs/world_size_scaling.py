"""wrong.reduction_scaling from logs: a result that grows or shrinks with the GPU count."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import signals

#: Columns whose value must not depend on the number of GPUs: losses and quality metrics
#: (throughput, batch sizes and times do, on purpose).
_QUALITY = re.compile(
    r"loss|acc|f1|bleu|rouge|iou|map\b|perplexity|ppl|grad_?norm|metric|score", re.IGNORECASE
)
#: How close the ratio of two runs' values must come to the ratio of their GPU counts.
_TOLERANCE = 0.05


@rule("logs.world_size_scaling", "wrong.reduction_scaling")
def world_size_scaling(evidence: EvidenceSet) -> Iterator[Finding]:
    """A loss or metric that is the GPU count times (or over) its value on fewer GPUs.

    What it detects:
    A table of results by GPU count (`| GPUs | train_loss | eval_loss |`) whose loss or
    quality column moves between two GPU counts by their ratio, within 5%: eval loss 0.55
    on 1 GPU and 4.44 on 8.

    Why it happens:
    A value summed over ranks where it should be averaged (or averaged where a sum was
    meant), or divided or multiplied by the world size twice or never: a loss normalised by
    the local token count and then scaled by world_size as if by the global one, a gradient
    all-reduced with SUM and no division, a metric gathered and summed.

    Evidence:
    The table's rows for the two GPU counts.

    Fix:
    Follow the value through the reduction: which step divides by the world size (the loss's
    normalisation, DDP's gradient average, the metric's gather), and make exactly one do it.

    Known false positives:
    A column named like a loss that is a per-step sum on purpose (a total over the global
    batch). Throughput and time columns are not read.

    References:
    https://pytorch.org/docs/stable/notes/ddp.html
    """
    for item, sig in signals(evidence, "generic.metric_table"):
        rows = sorted(sig.fields.get("rows", []), key=lambda row: row["gpus"])
        if len(rows) < 2 or rows[0]["gpus"] == rows[-1]["gpus"]:
            continue
        low, high = rows[0], rows[-1]
        expected = high["gpus"] / low["gpus"]
        for column, a in low["values"].items():
            b = high["values"].get(column)
            if b is None or not _QUALITY.search(column) or a <= 0 or b <= 0:
                continue
            moved = max(a, b) / min(a, b)
            if abs(moved - expected) > _TOLERANCE * expected:
                continue
            way = "times" if b > a else "over"
            yield Finding(
                title=f"{column} scales with the GPU count ({low['gpus']} -> {high['gpus']} GPUs)",
                summary=f"{column} is {a:g} on {low['gpus']} GPU{'s' if low['gpus'] > 1 else ''}"
                f" and {b:g} on {high['gpus']}: {moved:.2f}x, the ratio of the GPU counts"
                f" ({expected:g}x). A loss or metric that is the world size {way} its value was"
                " summed where it should be averaged, or divided by the world size twice or never.",
                ranks=[],
                confidence=0.5,
                evidence=[item.id],
                fix="Follow the value through the reduction: which step divides by the world size"
                " (the loss's normalisation, DDP's gradient average, the metric's gather), and"
                " make exactly one do it; check the value on 1 and 2 GPUs with the same global"
                " batch.",
                confirm="the value on 2 GPUs is twice (or half) the 1-GPU value with the same"
                " global batch",
            )
            return
