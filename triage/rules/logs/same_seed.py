"""wrong.seeding from logs: every rank seeded its random streams with one number."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, ids, shows_failure, signals

_SEED_LINES = frozenset({"seed.rank_seed"})


@rule("logs.same_seed", "wrong.seeding")
def same_seed(evidence: EvidenceSet) -> Iterator[Finding]:
    """Every rank set the same global seed, so every random draw outside the sampler repeats.

    What it detects:
    Lightning's `[rank: N] Global seed set to S` (`Seed set to S` since 2.1) printed by two
    or more ranks with the same S.

    Why it happens:
    `seed_everything(seed)` seeds Python, NumPy and torch alike on every rank. Weights
    should start equal (DDP broadcasts them anyway), but augmentation, noise, dropout,
    camera or prompt sampling and any shuffling done outside DistributedSampler then draw
    the same values on every rank: N GPUs train on N copies of one stream, and results do
    not improve with the GPU count.

    Evidence:
    The seed line of each rank.

    Fix:
    Keep the model's seed global, and offset every per-sample stream by the rank:
    `seed_everything(seed + trainer.global_rank)` after the model is built, or a
    `torch.Generator` seeded with `seed + rank` for the sampling code; DataLoader workers
    get `workers=True`.

    Known false positives:
    A job whose randomness all flows through DistributedSampler and the model's own
    initialisation is right to use one seed everywhere (most Lightning jobs print these
    lines): the finding is weak, and it is not made when the text shows a failure (a
    traceback, an error or timeout line), whose rules name its cause.

    References:
    https://lightning.ai/docs/pytorch/stable/common/trainer.html#reproducibility
    """
    by_seed: dict[int, list[Signal]] = defaultdict(list)
    ranks: dict[int, set[int]] = defaultdict(set)
    for item in signals(evidence, "seed.rank_seed"):
        seed = int(item[1].fields["seed"])
        by_seed[seed].append(item)
        ranks[seed].add(int(item[1].fields["rank"]))
    shared = [seed for seed, who in ranks.items() if len(who) > 1]
    if not shared or shows_failure(evidence, besides=_SEED_LINES):
        return
    seed = shared[0]
    every = sorted(ranks[seed])
    yield Finding(
        title=f"ranks {', '.join(map(str, every))} all set global seed {seed}",
        summary=f"Ranks {', '.join(map(str, every))} each print `Global seed set to {seed}`:"
        " every random draw outside the sampler (augmentation, noise, dropout, sampled views"
        " or prompts) repeats on every rank, so the extra GPUs duplicate rank 0's stream.",
        ranks=[],
        confidence=0.25,
        evidence=ids(by_seed[seed])[:8],
        fix="Keep one seed for the model's initialisation, then give each rank its own stream:"
        " `seed_everything(seed + trainer.global_rank)` after the model is built (or a"
        " torch.Generator seeded with seed + rank for the sampling code), and"
        " `seed_everything(seed, workers=True)` for DataLoader workers.",
        confirm="print a random draw of the sampling code (torch.rand(1), the first augmentation"
        " parameter) on every rank: identical values confirm it",
    )
