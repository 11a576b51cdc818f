"""wrong.seeding from logs: the ranks print the same batch or draw, where each needs its own."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._rank_prints import Printed, list_items, printed
from triage.rules.logs._signals import shows_failure

#: Names of what each rank draws for itself: its batches, samples, indices, random draws.
_DRAWN = re.compile(
    r"(?i)batch|sample|indic|index|\bids?\b|cuts?\b|files?\b|images?\b|paths?\b|order|perm|"
    r"shuffl|rand|draw|augment|crop|noise|tokens?\b|prompts?\b|examples?\b|utt|items?\b|"
    r"data|views?\b|keys?\b"
)
#: A printed list shorter than this may repeat by chance.
_MIN_ITEMS = 4


@rule("logs.rank_data_repeats", "wrong.seeding")
def rank_data_repeats(evidence: EvidenceSet) -> Iterator[Finding]:
    """Two or more ranks print the same batch, samples or random draw at the same point.

    What it detects:
    Per-rank prints of a batch's contents, sample indices or ids, or a random draw
    (`Rank 0. Batch idx: 6, cuts: ['a', 'b', ...]` and the same list on rank 1) under a name
    that says it is data, holding a list of at least four items, identical on two or more
    ranks at the same point of the run.

    Why it happens:
    Each rank must read its own shard of the data and draw its own augmentations. A sampler
    that was not told the rank (no DistributedSampler, a sampler whose rank detection
    failed, a dataset shard chosen before the process group existed), or DataLoader workers
    and random streams seeded alike on every rank, give every GPU the same batches: N GPUs
    train on one stream, and the results stop improving with the GPU count.

    Evidence:
    The prints of the repeated list on each rank.

    Fix:
    Give the sampler the rank and world size (DistributedSampler, or the library's
    `rank=`/`world_size=` arguments once the process group exists), and seed per-sample
    streams and DataLoader workers with the rank (`seed + rank`, a `worker_init_fn` that
    folds in the rank).

    Known false positives:
    Data every rank must hold alike (an evaluation set each rank scores in full, a shared
    vocabulary) printed under a data name. The finding is not made when the text shows a
    failure, whose rules name its cause.

    References:
    https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """
    if shows_failure(evidence):
        return
    for entry in printed(evidence):
        same = _repeated(entry)
        if same:
            yield _finding(entry, same)
            return


def _repeated(entry: Printed) -> list[int]:
    """The ranks that print the same data list, when two or more do."""
    if not _DRAWN.search(f"{entry.key} {entry.position}"):
        return []
    by_value: dict[str, list[int]] = {}
    for rank, value in entry.values.items():
        if list_items(value) >= _MIN_ITEMS:
            by_value.setdefault(value, []).append(rank)
    most = max(by_value.values(), key=len, default=[])
    return most if len(most) > 1 else []


def _finding(entry: Printed, same: list[int]) -> Finding:
    who = ", ".join(map(str, sorted(same)))
    where = f" at {entry.position}" if entry.position else ""
    name = f"`{entry.key}`" if entry.key else "the same data"
    return Finding(
        title=f"ranks {who} print the same {name}{where}",
        summary=f"Ranks {who} print an identical {name}{where}: each rank should read its own"
        " shard and draw its own samples, so the sampler or the random streams do not know the"
        " rank, and the extra GPUs repeat one stream.",
        ranks=[],
        confidence=0.5,
        evidence=[entry.lines[r][0].id for r in sorted(same)][:8],
        fix="Give the sampler the rank and world size (DistributedSampler, or the data"
        " library's rank/world_size arguments once the process group exists), and seed"
        " per-sample streams and DataLoader workers with the rank (seed + rank; a"
        " worker_init_fn that folds in the rank).",
        confirm="print the first sample ids of one batch on every rank after the fix: they"
        " must differ",
    )
