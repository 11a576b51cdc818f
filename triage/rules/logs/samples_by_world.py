"""wrong.eval_sharding from logs: an evaluated-sample count that grows with the world size,
pasted once per GPU count (a sampler padding the dataset)."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids
from triage.rules.logs._world_metrics import padded_counts, shown


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
    padded = padded_counts(evidence)
    if not padded:
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
