"""config.env_missing from the environment: ranks with only some of the variables env://
initialization needs, or ranks of one job that disagree on the master."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import RankActivity, RankState
from triage.readers.environment import Item, environment_view, odd_ones, ranks_of, spread, who
from triage.registry import EvidenceSet, rule

#: What init_process_group's default env:// method reads.
REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@rule("env.env_missing", "config.env_missing")
def env_missing(evidence: EvidenceSet) -> Iterator[Finding]:
    """A rank's launcher environment is incomplete or inconsistent with its peers'.

    What it detects:
    A rank that has some of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT but not all (env://
    initialization needs all four); ranks of one torchelastic run that disagree on
    MASTER_ADDR or MASTER_PORT (both set, different values).

    Why it happens:
    Hand-written launch wrappers (SLURM, MPI, Kubernetes) that export some variables and
    forget others, or compute them per node differently. A process with none of them was
    probably started by mp.spawn or passes rank and world size in code; it is not reported.

    Evidence:
    Each rank's launcher variables (check_environment).

    Fix:
    Export all four variables for every rank (or launch with torchrun, which does), with
    the same MASTER_ADDR:MASTER_PORT everywhere.

    Known false positives:
    Scripts that pass rank, world_size and init_method to init_process_group explicitly
    need none of them (mp.spawn's workers): where a rank's stack already stands in a
    collective, the process group was initialised and the partial set is not reported.

    References:
    torch.distributed docs, "Environment variable initialization".
    """
    view = environment_view(evidence)
    partial = []
    initialised = any(
        state.activity in (RankActivity.collective, RankActivity.p2p)
        for _, state in evidence.payloads(RankState)
    )
    for e, f in view.ranks:
        present = [n for n in REQUIRED if f.variables.get(n)]
        if present and len(present) < len(REQUIRED) and not initialised:
            partial.append((e, f, [n for n in REQUIRED if n not in present]))
    if partial:
        missing = sorted({n for _, _, names in partial for n in names})
        holders = [f for _, f, _ in partial]
        yield Finding(
            title=f"{', '.join(missing)} not set on {who(holders)}",
            summary=f"{who(holders)} {'has' if len(holders) == 1 else 'have'} part of the env:// "
            f"variables but not {', '.join(missing)}; init_process_group's default env:// "
            "initialization needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.",
            ranks=ranks_of(holders),
            confidence=0.6,
            evidence=[e.id for e, _, _ in partial],
            fix="Export RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every rank (torchrun does), "
            "or pass rank, world_size and init_method to init_process_group.",
            confirm="the rank fails with `environment variable ... expected, but not set` or waits "
            "forever in init_process_group",
        )
    runs: dict[str, dict[str, list[Item]]] = {}
    for e, f in view.ranks:
        run, addr, port = (
            f.variables.get(n) for n in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")
        )
        if run and addr and port:
            runs.setdefault(run, {}).setdefault(f"{addr}:{port}", []).append((e, f))
    for run, by_master in runs.items():
        if len(by_master) < 2:
            continue
        masters = {m: [f for _, f in items] for m, items in by_master.items()}
        yield Finding(
            title=f"ranks of run {run} disagree on the master",
            summary=f"Ranks of torchelastic run {run} point at different masters: "
            f"{spread(masters)}; they cannot meet in one process group.",
            ranks=odd_ones(masters),
            confidence=0.7,
            evidence=[e.id for items in by_master.values() for e, _ in items],
            fix="Launch every node with the same --rdzv-endpoint / --master-addr and --master-port.",
            confirm="the nodes' launch commands name different master addresses or ports",
        )
