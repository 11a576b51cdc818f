"""Environment: a rank's variables and limits, and this host's facts."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from triage.observations.payload import Payload


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

    EVIDENCE_KIND: ClassVar[str] = "environment"

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
    nvidia_devices: int | None = Field(
        default=None,
        description="Host: its /dev/nvidiaN device files; 0: no NVIDIA GPU, so no NCCL here.",
    )
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
