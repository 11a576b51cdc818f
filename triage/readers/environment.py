"""What the tool and the rules share about `environment` evidence, beyond its payload.

`check_environment` (tools/check_environment.py) writes one EnvironmentFacts item per rank
(its variables, limits and library versions, read from /proc) and one for the host
(interfaces, /dev/shm, InfiniBand ports, the master's reachability, GPUs), both read by
triage/readers/host_facts.py; the payload is typed in triage/observations/host.py. Rules
compare them: a socket interface that does not exist, two ranks on one GPU, ranks that
disagree on WORLD_SIZE. The matching of NCCL's interface lists and the comparison of
variables across ranks live here so the tool's summary and the rules agree on what a
setting selects and what differs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from triage.models import Evidence
from triage.observations import EnvironmentFacts
from triage.registry import EvidenceSet
from triage.text import rank_label

#: A rank's (or the host's) environment evidence with its payload.
Item = tuple[Evidence, EnvironmentFacts]

#: A problem among one job's ranks: confidence, what is wrong, the ranks that show it.
Problem = tuple[float, str, list[Item]]

#: Variables that are meant to differ between ranks; every other difference is suspect.
PER_RANK = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "NODE_RANK",
        "CUDA_VISIBLE_DEVICES",
        "TORCHELASTIC_ERROR_FILE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_TASK_PID",
        "SLURM_STEP_GPUS",
        "NVIDIA_VISIBLE_DEVICES",
    }
)

LOCAL_ADDRESSES = ("127.", "localhost", "::1")


def select_interfaces(spec: str, names: Iterable[str], *, exact_only: bool = False) -> list[str]:
    """The interfaces an NCCL-style list selects from `names`.

    NCCL: comma-separated prefixes (`eth` selects eth0, eth1); a leading `=` asks for exact
    names, a leading `^` excludes instead of selects (`^docker,lo`, `^=docker0`). Gloo
    (`exact_only`) takes exact, comma-separated names.
    """
    text = spec.strip()
    exclude = text.startswith("^") and not exact_only
    if exclude:
        text = text[1:]
    exact = exact_only or text.startswith("=")
    if text.startswith("="):
        text = text[1:]
    wanted = [w.strip() for w in text.split(",") if w.strip()]

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    names = list(names)
    return [n for n in names if hit(n) != exclude]


def differing(facts: Iterable[EnvironmentFacts]) -> dict[str, dict[str, list[EnvironmentFacts]]]:
    """Variables that are not per-rank yet differ across ranks: name -> value -> ranks' facts.

    A variable set on some ranks and absent on others differs too (value '<unset>').
    """
    ranks = [f for f in facts if f.scope == "rank"]
    names = {n for f in ranks for n in f.variables if n not in PER_RANK and n not in f.redacted}
    out: dict[str, dict[str, list[EnvironmentFacts]]] = {}
    for name in sorted(names):
        values: dict[str, list[EnvironmentFacts]] = {}
        for f in ranks:
            values.setdefault(f.variables.get(name, "<unset>"), []).append(f)
        if len(values) > 1:
            out[name] = values
    return out


@dataclass
class EnvironmentView:
    """The environment evidence of one triage: each rank's facts and the host's."""

    ranks: list[Item]
    host: Item | None

    def jobs(self) -> list[list[Item]]:
        """Ranks grouped by job (run id or master); ranks with no key join the largest job."""
        groups: dict[str | None, list[Item]] = {}
        for item in self.ranks:
            groups.setdefault(item[1].job_key(), []).append(item)
        loose = groups.pop(None, [])
        if not groups:
            return [loose] if loose else []
        largest = max(groups, key=lambda k: len(groups[k]))
        groups[largest] = groups[largest] + loose
        return list(groups.values())

    def local_world(self) -> int:
        """How many ranks run on this host: LOCAL_WORLD_SIZE, or the ranks seen."""
        sizes = [f.local_world_size for _, f in self.ranks if f.local_world_size]
        return max(sizes + [len(self.ranks)])

    def multi_host(self) -> bool | None:
        """True when WORLD_SIZE exceeds the ranks on this host; False when it does not or
        the master is a loopback address; None when the environment does not say."""
        worlds = [f.world_size for _, f in self.ranks if f.world_size]
        if worlds and max(worlds) > self.local_world():
            return True
        masters = {f.variables.get("MASTER_ADDR") for _, f in self.ranks} - {None}
        if masters and all(m and m.startswith(LOCAL_ADDRESSES) for m in masters):
            return False
        if worlds and max(worlds) <= self.local_world():
            return False
        return None


def environment_view(evidence: EvidenceSet) -> EnvironmentView:
    """Parsed once per evidence set and shared by the env_* rules."""

    def build() -> EnvironmentView:
        items = evidence.payloads(EnvironmentFacts)
        ranks = [(e, f) for e, f in items if f.scope == "rank"]
        host = next(((e, f) for e, f in items if f.scope == "host"), None)
        return EnvironmentView(ranks, host)

    return evidence.derived("environment_view", build)


def ranks_of(facts: Iterable[EnvironmentFacts]) -> list[int]:
    return sorted({f.rank for f in facts if f.rank is not None})


def who(facts: Iterable[EnvironmentFacts]) -> str:
    """'ranks 0-3' or 'pid 1234' for a summary."""
    items = list(facts)
    ranks = ranks_of(items)
    if ranks:
        return rank_label(ranks)
    pids = sorted({f.pid for f in items if f.pid is not None})
    return "pid " + ",".join(map(str, pids)) if pids else "this host"


def spread(values: dict[str, list[EnvironmentFacts]]) -> str:
    """Which ranks hold which value: '2.5.1 on ranks 0-2; 2.4.0 on rank 3'."""
    return "; ".join(f"{value} on {who(holders)}" for value, holders in values.items())


def odd_ones(values: dict[str, list[EnvironmentFacts]]) -> list[int]:
    """The ranks holding the rarest value: the ones to look at when ranks disagree."""
    rarest = min(values.values(), key=len)
    return ranks_of(rarest)


def worst(found: list[Problem]) -> tuple[float, str, str, list[int]]:
    """A job's most confident problem (the first of equals): its confidence, its title, a
    summary that names the other problems too, and the ranks that show it."""
    confidence, what, culprits = max(found, key=lambda f: f[0])
    others = "; ".join(w for _, w, _ in found if w != what)
    return confidence, what, f"{what}. {others}", ranks_of(f for _, f in culprits)
