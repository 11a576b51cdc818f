"""The `environment` evidence payload: what a rank's environment and this host provide.

`check_environment` (tools/environment.py) writes one item per rank (its variables,
limits and library versions, read from /proc) and one for the host (interfaces,
/dev/shm, InfiniBand ports, the master's reachability, GPUs). Rules compare them: a
socket interface that does not exist, two ranks on one GPU, ranks that disagree on
WORLD_SIZE. The matching of NCCL's interface lists lives here so the tool's summary
and the rules agree on what a setting selects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from triage.models import Evidence
from triage.observations import Payload
from triage.rulebook import EvidenceSet
from triage.text import format_ranks

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
_SECRET = re.compile(
    r"(?i)token|secret|passw|credential|api_?key|access_?key|private|auth|cookie|(?:^|_)key(?:_|$)"
)


def is_secret(name: str) -> bool:
    """Variables whose values must never leave the host (tokens, keys, passwords)."""
    return bool(_SECRET.search(name))


class Interface(Payload):
    """A network interface of the host as the kernel reports it."""

    name: str
    addresses: list[str] = Field(default_factory=list, description="IPv4/IPv6 addresses.")
    up: bool | None = None
    mtu: int | None = None
    loopback: bool = False
    virtual: bool = Field(default=False, description="docker0, br-*, veth*, virbr*: host-local.")


class IbPort(Payload):
    """One InfiniBand/RoCE port from /sys/class/infiniband."""

    device: str
    port: int
    state: str = Field(description="ACTIVE, DOWN, INIT, ...")
    link_layer: str | None = Field(default=None, description="InfiniBand or Ethernet (RoCE).")


class MasterCheck(Payload):
    """Whether MASTER_ADDR:MASTER_PORT accepts a TCP connection (connect only, no data)."""

    address: str
    port: int
    status: Literal["reachable", "refused", "timeout", "unresolvable", "unreachable", "error"]
    detail: str = ""


class Gpu(Payload):
    """A GPU as nvidia-smi lists it."""

    index: int
    name: str = ""
    bus_id: str = ""
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None


class GpuProcess(Payload):
    """A process holding GPU memory, as nvidia-smi lists it."""

    pid: int
    bus_id: str = ""
    used_mib: int | None = None
    name: str = ""


class EnvironmentFacts(Payload):
    """One rank's environment (scope 'rank') or this host's facts (scope 'host')."""

    scope: Literal["rank", "host"]
    host: str
    pid: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    variables: dict[str, str] = Field(
        default_factory=dict,
        description="Launcher, NCCL_*, TORCH_*, CUDA_*, GLOO_* variables; secrets redacted.",
    )
    redacted: list[str] = Field(
        default_factory=list, description="Variables whose value was hidden."
    )
    memlock_bytes: int | None = Field(
        default=None, description="Soft RLIMIT_MEMLOCK in bytes; None when unlimited or unknown."
    )
    memlock_unlimited: bool | None = None
    torch_version: str | None = None
    nccl_version: str | None = None
    interfaces: list[Interface] = Field(
        default_factory=list,
        description="Host: its interfaces. Rank: those of its own network namespace, only when "
        "it differs from the host's (a container network).",
    )
    shm_total_bytes: int | None = Field(
        default=None, description="/dev/shm as this rank (or the host) sees it."
    )
    shm_free_bytes: int | None = None
    ib_ports: list[IbPort] = Field(default_factory=list)
    masters: list[MasterCheck] = Field(default_factory=list)
    gpus: list[Gpu] | None = Field(default=None, description="None: nvidia-smi not available.")
    gpu_processes: list[GpuProcess] = Field(default_factory=list)
    topology: str | None = Field(default=None, description="`nvidia-smi topo -m`, bounded.")

    def visible_devices(self) -> list[str] | None:
        """CUDA_VISIBLE_DEVICES as a list; None when unset (every GPU is visible)."""
        value = self.variables.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return None
        return [d.strip() for d in value.split(",") if d.strip()]

    def job_key(self) -> str | None:
        """Ranks with the same key belong to one job: torchelastic run id, else the master."""
        run = self.variables.get("TORCHELASTIC_RUN_ID")
        if run:
            return f"run:{run}"
        addr, port = self.variables.get("MASTER_ADDR"), self.variables.get("MASTER_PORT")
        return f"{addr}:{port}" if addr and port else None


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

    ranks: list[tuple[Evidence, EnvironmentFacts]]
    host: tuple[Evidence, EnvironmentFacts] | None

    def jobs(self) -> list[list[tuple[Evidence, EnvironmentFacts]]]:
        """Ranks grouped by job (run id or master); ranks with no key join the largest job."""
        groups: dict[str | None, list[tuple[Evidence, EnvironmentFacts]]] = {}
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
        items = evidence.payloads("environment", EnvironmentFacts)
        ranks = [(e, f) for e, f in items if f.scope == "rank"]
        host = next(((e, f) for e, f in items if f.scope == "host"), None)
        return EnvironmentView(ranks, host)

    return evidence.derived("environment_view", build)


def who(facts: Iterable[EnvironmentFacts]) -> str:
    """'rank 0-3' or 'pid 1234' for a summary."""
    items = list(facts)
    ranks = sorted({f.rank for f in items if f.rank is not None})
    if ranks:
        return f"rank {format_ranks(ranks)}"
    pids = sorted({f.pid for f in items if f.pid is not None})
    return "pid " + ",".join(map(str, pids)) if pids else "this host"
