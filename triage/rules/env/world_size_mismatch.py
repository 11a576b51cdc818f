"""config.world_size_mismatch from the environment: the ranks of one job disagree on
WORLD_SIZE, share a RANK, or hold a rank outside the world."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from triage.models import Finding
from triage.readers.environment import Item, Problem, environment_view, who, worst
from triage.registry import EvidenceSet, rule
from triage.text import agree, plural

_FIX = (
    "Launch every process of the job with the same WORLD_SIZE and a distinct RANK in "
    "[0, WORLD_SIZE): one launcher invocation per node with the same --nnodes and "
    "--nproc-per-node everywhere, and a MASTER_PORT no other job uses."
)


@rule("env.world_size_mismatch", "config.world_size_mismatch")
def world_size_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """The live ranks of one job disagree about the world they belong to.

    What it detects:
    Among ranks of one job (same TORCHELASTIC_RUN_ID, or same MASTER_ADDR:MASTER_PORT):
    WORLD_SIZE differs between ranks; two processes hold the same RANK; a RANK is not below
    WORLD_SIZE; a LOCAL_RANK is not below LOCAL_WORLD_SIZE.

    Why it happens:
    Nodes launched with different --nnodes/--nproc-per-node, a hand-written launch script
    that computes RANK wrongly, a second job reusing the first one's MASTER_PORT, or two
    launch layers (srun plus mp.spawn) each starting ranks.

    Evidence:
    RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE of each rank (check_environment).

    Fix:
    One consistent launch per node; distinct ranks in [0, WORLD_SIZE); one MASTER_PORT per job.

    Known false positives:
    Processes of two different jobs that share neither a run id nor a master are not
    compared. DataLoader workers inherit their rank's environment; pass rank processes only.

    References:
    torchrun docs (--nnodes, --nproc-per-node, environment variables).
    """
    view = environment_view(evidence)
    for job in view.jobs():
        found = _problems(job)
        if not found:
            continue
        confidence, what, summary, ranks = worst(found)
        yield Finding(
            title=what,
            summary=summary,
            ranks=ranks,
            confidence=confidence,
            evidence=[e.id for e, _ in job],
            fix=_FIX,
            confirm="the launch commands of the nodes (or the launch script's RANK arithmetic) "
            "give different --nnodes/--nproc-per-node or repeat a rank",
        )


def _problems(job: list[Item]) -> list[Problem]:
    found: list[Problem] = []
    worlds = Counter(f.world_size for _, f in job if f.world_size is not None)
    if len(worlds) > 1:
        common = worlds.most_common(1)[0][0]
        odd = [(e, f) for e, f in job if f.world_size is not None and f.world_size != common]
        sizes = ", ".join(f"{size} on {plural(n, 'rank')}" for size, n in sorted(worlds.items()))
        found.append((0.85, f"ranks disagree on WORLD_SIZE ({sizes})", odd))
    ranks = Counter(f.rank for _, f in job if f.rank is not None)
    twice = sorted(r for r, n in ranks.items() if n > 1)
    if twice:
        dup = [(e, f) for e, f in job if f.rank in twice]
        found.append((0.8, f"RANK {', '.join(map(str, twice))} is held by several processes", dup))
    outside = [
        (e, f) for e, f in job if f.rank is not None and f.world_size and f.rank >= f.world_size
    ]
    if outside:
        found.append(
            (
                0.85,
                f"{who(f for _, f in outside)} {agree(len(outside), 'are')} outside WORLD_SIZE={outside[0][1].world_size}",
                outside,
            )
        )
    local_outside = [
        (e, f)
        for e, f in job
        if f.local_rank is not None and f.local_world_size and f.local_rank >= f.local_world_size
    ]
    if local_outside:
        found.append(
            (
                0.7,
                f"LOCAL_RANK of {who(f for _, f in local_outside)} is not below LOCAL_WORLD_SIZE",
                local_outside,
            )
        )
    return found
