"""Typed payloads of the evidence kinds that tools produce and rules read.

Tools and rules never import each other; they meet here. Each Evidence item carries
the payload of its kind in `data`:

- `process`: RankProcess, `missing_rank`: MissingRank, `stack`: RankState (live ranks)
- `log_signal`: LogSignal, `traceback`: TracebackRecord, `log_file`: LogFile (logs)
- `environment`: EnvironmentFacts (a rank's environment or this host's facts)
- `memory_dump`: MemoryDump, `memory_growth`: MemoryGrowth (CUDA memory dumps)
- `probe_snapshot`: SnapshotSummary, `replica_check`: ReplicaCheck (triage.probe files)
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from triage.models import Contract, Location


class Payload(Contract):
    """Base of evidence payloads: strict like every contract."""


# --- live ranks: processes and their stacks --------------------------------------------


class RankProcess(Payload):
    """A live process of the job and what its environment says about its place in it."""

    pid: int
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    group_rank: int | None = Field(default=None, description="Node index (torchrun GROUP_RANK).")
    host: str
    launcher: str | None = Field(default=None, description="torchrun, mp.spawn, srun, ...")
    launcher_pid: int | None = None
    job_id: str | None = Field(default=None, description="TORCHELASTIC_RUN_ID or master addr:port.")
    master: str | None = None
    status: str = "running"
    cmdline: str = ""
    rank_source: str = Field(default="env", description="Where the rank came from.")


class MissingRank(Payload):
    """A rank the job should have that no live process holds."""

    rank: int | None = Field(default=None, description="Global rank, when it can be known.")
    local_rank: int | None = None
    world_size: int
    scope: str = Field(description="'host': it belongs on this host; 'job': may run elsewhere.")
    reason: str


class Frame(Payload):
    """One Python frame; `locals` holds py-spy's repr of arguments when it read them."""

    function: str
    file: str
    line: int | None = None
    locals: dict[str, str] = Field(default_factory=dict)

    def location(self) -> Location:
        return Location(file=self.file, line=self.line, function=self.function)

    def key(self) -> tuple[str, str, int | None]:
        return (self.function, self.file, self.line)


class RankActivity(StrEnum):
    """What a rank's main thread is doing, coarse enough to group thousands of ranks."""

    collective = "collective"
    p2p = "p2p"
    group_setup = "group_setup"
    exiting = "exiting"
    compute = "compute"
    data_loading = "data_loading"
    io = "io"
    idle = "idle"
    lock = "lock"
    debugger = "debugger"
    unknown = "unknown"

    @property
    def waits_on_peers(self) -> bool:
        return self in (RankActivity.collective, RankActivity.p2p, RankActivity.group_setup)


class RankState(Payload):
    """One rank's classified stack: the op it blocks in (if any) and the user frame."""

    rank: int | None
    pid: int
    host: str = ""
    activity: RankActivity
    op: str | None = Field(default=None, description="all_reduce, barrier, recv, new_group, ...")
    group: str | None = Field(default=None, description="'default', 'subgroup' or unknown.")
    peer: int | None = Field(default=None, description="src/dst of a point-to-point op.")
    group_ranks: list[int] | None = Field(
        default=None, description="Members of the group being created (new_group's `ranks`)."
    )
    detail: str = Field(default="", description="Why this activity: the frame that showed it.")
    user_frame: Frame | None = None
    call_path: list[Frame] = Field(
        default_factory=list, description="Frames outside torch and the stdlib, outermost first."
    )
    frames: list[Frame] = Field(default_factory=list, description="Main thread, innermost first.")
    thread: str = ""

    def signature(self) -> tuple[object, ...]:
        """Ranks with equal signatures are in the same state and grouped together."""
        where = self.user_frame.key() if self.user_frame else None
        return (self.activity.value, self.op, self.group, where)

    def describe(self) -> str:
        what = self.activity.value if self.op is None else f"{self.activity.value} {self.op}"
        if self.peer is not None:
            what += f" (peer {self.peer})"
        if self.group not in (None, "default"):
            what += f" on group {self.group}"
        return what


# --- logs: failure signatures, tracebacks, the files read ------------------------------


class LogSignal(Payload):
    """A log line matching a known failure signature, attributed to a rank where the log shows it."""

    signature: str = Field(
        description="Name from the signature table, e.g. 'nccl.watchdog_timeout'."
    )
    text: str = Field(description="The matching line (bounded), prefixes stripped.")
    path: str
    line: int = Field(description="1-based line number in the file.")
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    peer_symptom: bool = Field(
        default=False, description="The line reports another rank's failure, not its own."
    )
    fields: dict[str, Any] = Field(default_factory=dict)


class TracebackRecord(Payload):
    """A Python traceback or a stack dump found in a log, innermost frame first."""

    path: str
    line: int
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    exception: str | None = Field(default=None, description="Exception type, e.g. 'RuntimeError'.")
    message: str = ""
    frames: list[Frame] = Field(default_factory=list, description="Innermost first.")
    user_frame: Frame | None = Field(default=None, description="Innermost frame of user code.")
    dump: bool = Field(
        default=False,
        description="A stack dump of a live process (faulthandler, py-spy, or a traceback "
        "forced by Ctrl-C or a launcher's SIGTERM), not the error itself.",
    )


class LogFile(Payload):
    """A file the log scanner read, and what it learned about the file as a whole."""

    path: str
    size: int
    rank: int | None = Field(default=None, description="The first rank its lines name.")
    lines: int = Field(description="Lines in the file.")
    truncated_hits: int = Field(default=0, description="Matches dropped to bound memory.")


# --- environment: a rank's variables and limits, this host's facts ---------------------


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


# --- memory dumps: CUDA snapshots and memory_stats() -----------------------------------


class AllocationSite(Payload):
    """Bytes held by allocations made from one user line."""

    frame: Frame
    bytes: int
    count: int = 0


class MemoryDump(Payload):
    """One device's memory as a snapshot or a memory_stats dump saw it; sizes in bytes."""

    path: str
    format: str = Field(description="'snapshot' (torch.cuda.memory._snapshot) or 'memory_stats'.")
    label: str = Field(default="", description="Entry within the file: device, step or key.")
    rank: int | None = None
    device: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    active: int | None = None
    inactive: int | None = Field(default=None, description="Reserved but not allocated.")
    inactive_split: int | None = Field(
        default=None, description="Free bytes inside segments that also hold live blocks."
    )
    largest_free_block: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    segments: int | None = None
    num_ooms: int | None = None
    num_alloc_retries: int | None = None
    oom_requested: int | None = Field(default=None, description="Size of the request that failed.")
    oom_device_free: int | None = Field(default=None, description="Free on the device at the OOM.")
    oom_frames: list[Frame] = Field(
        default_factory=list, description="Where the failed request came from, innermost first."
    )
    top_sites: list[AllocationSite] = Field(
        default_factory=list, description="Live allocations grouped by user line, largest first."
    )
    trace_growth: int | None = Field(
        default=None, description="Rise of the memory floor across the recorded allocation trace."
    )
    unfreed_sites: list[AllocationSite] = Field(
        default_factory=list, description="Allocations of the trace never freed, by user line."
    )
    expandable_segments: bool | None = None


class GrowthPoint(Payload):
    """One dump of a series: its label and the memory it shows."""

    label: str
    allocated: int | None = None
    reserved: int | None = None


class MemoryGrowth(Payload):
    """One device's memory across several dumps in order: a leak grows, a working set does not."""

    rank: int | None = None
    device: int | None = None
    points: list[GrowthPoint]
    growth: int = Field(description="Allocated bytes, last minus first.")
    monotonic: bool
    growing_sites: list[AllocationSite] = Field(
        default_factory=list, description="User lines whose live bytes grew most, first to last."
    )
    paths: list[str] = Field(default_factory=list)


# --- in-process probe snapshots (triage.probe) ------------------------------------------
#
# `triage.probe.snapshot()` writes one JSON file per rank and call, shaped like
# ProbeSnapshot (written with the standard library; validated here when read). The reader
# compares ranks and calls, and emits compact evidence (SnapshotSummary per file,
# ReplicaCheck per call), so rules never hold thousands of parameters of thousands of ranks.

PROBE_FORMAT: Literal["triage.probe/1"] = "triage.probe/1"


class TensorStats(Payload):
    """Content of one tensor (the local shard of a DTensor), enough to compare replicas."""

    checksum: str = Field(description="Hash of the raw bytes: equal bytes, equal checksum.")
    sum: float | None = None
    norm: float | None = Field(default=None, description="L2 norm, float64.")
    nonfinite: int = Field(default=0, description="NaN and Inf elements.")


class TensorRecord(Payload):
    """A parameter or buffer of the model as this rank holds it."""

    name: str = Field(description="Module path as named_parameters()/named_buffers() give it.")
    kind: Literal["parameter", "buffer"]
    shape: list[int] = Field(description="Global shape (a DTensor's full shape).")
    local_shape: list[int] | None = Field(default=None, description="This rank's shard shape.")
    dtype: str
    device: str
    requires_grad: bool = False
    placements: list[str] | None = Field(
        default=None, description="DTensor placements, e.g. ['Shard(dim=0)'] or ['Replicate()']."
    )
    mesh: int | None = Field(default=None, description="Index into ProbeSnapshot.meshes.")
    value: TensorStats | None = Field(default=None, description="None when not read (a hung GPU).")
    grad: TensorStats | None = Field(default=None, description="None: no .grad on this rank.")


class GroupRecord(Payload):
    """A process group this rank belongs to."""

    name: str
    ranks: list[int]
    backend: str | None = None
    description: str | None = None


class MeshRecord(Payload):
    """A DeviceMesh: its shape, dimension names and the global ranks it holds, row-major."""

    device_type: str
    shape: list[int]
    dim_names: list[str] | None = None
    ranks: list[int]


class ThreadStack(Payload):
    """One thread's Python stack at the snapshot, innermost frame first."""

    thread: str
    thread_id: int
    frames: list[Frame]


class ProbeSnapshot(Payload):
    """One rank's in-process evidence at one call of triage.probe.snapshot()."""

    format: Literal["triage.probe/1"] = PROBE_FORMAT
    rank: int | None
    world_size: int | None = None
    local_rank: int | None = None
    backend: str | None = None
    host: str
    pid: int
    time: float = Field(description="Unix time of the snapshot.")
    call: int = Field(description="0-based index of this call in this process.")
    tag: str | None = Field(default=None, description="The caller's label, e.g. 'step 100'.")
    reason: Literal["call", "signal"] = "call"
    model: str | None = Field(default=None, description="Class name of the model passed.")
    wrappers: list[str] = Field(
        default_factory=list, description="Wrappers around the model: DistributedDataParallel, ..."
    )
    groups: list[GroupRecord] = Field(default_factory=list)
    meshes: list[MeshRecord] = Field(default_factory=list)
    tensors: list[TensorRecord] = Field(default_factory=list)
    optimizer: dict[str, Any] | None = Field(
        default=None, description="Optimizer class, hyperparameters per group, state size."
    )
    cuda_memory: dict[str, int] | None = Field(
        default=None, description="Counters of torch.cuda.memory_stats() for this rank's device."
    )
    flight_recorder: str | None = Field(
        default=None, description="File name of the Flight Recorder dump written beside it."
    )
    stacks: list[ThreadStack] = Field(default_factory=list)
    environment: dict[str, str] = Field(
        default_factory=dict, description="Launcher, NCCL_*, TORCH_* variables; secrets redacted."
    )
    errors: list[str] = Field(
        default_factory=list, description="What could not be gathered, one line each."
    )


class SnapshotSummary(Payload):
    """Evidence `probe_snapshot`: what one snapshot file holds, without the tensors."""

    path: str
    rank: int | None
    world_size: int | None = None
    call: int
    tag: str | None = None
    reason: Literal["call", "signal"] = "call"
    backend: str | None = None
    wrappers: list[str] = Field(default_factory=list)
    meshes: list[MeshRecord] = Field(default_factory=list)
    parameters: int = 0
    buffers: int = 0
    without_grad: list[str] = Field(
        default_factory=list, description="Trainable parameters with no .grad (bounded)."
    )
    nonfinite: list[str] = Field(
        default_factory=list, description="Tensors or gradients with NaN/Inf (bounded)."
    )
    user_frame: Frame | None = Field(
        default=None, description="Innermost user frame of the main thread at the snapshot."
    )
    errors: list[str] = Field(default_factory=list)


class TensorDivergence(Payload):
    """One tensor that is not the same on every rank that should hold the same copy."""

    name: str
    kind: Literal["parameter", "buffer"]
    what: Literal["value", "grad", "placements", "grad_presence", "nonfinite"]
    ranks: list[int] = Field(
        description="The outlier ranks (the minority, or all when no majority)."
    )
    agreeing: list[int] = Field(
        default_factory=list, description="Ranks that agree with each other."
    )
    max_relative_diff: float | None = Field(
        default=None, description="Largest |norm difference| / norm against the majority."
    )
    detail: str = ""


class ReplicaCheck(Payload):
    """Evidence `replica_check`: ranks compared at one call (same call index or tag).

    Tensors are compared among ranks that should hold identical copies: all ranks for a
    plain or DDP replica, ranks of the same mesh coordinate on the other dims for DTensors
    (Replicate placements), never across shards.
    """

    call: int
    tag: str | None = None
    ranks: list[int]
    world_size: int | None = None
    compared: int = Field(description="Tensors compared.")
    diverging: list[TensorDivergence] = Field(default_factory=list, description="Bounded.")
    diverging_total: int = 0
    first_call: bool = Field(description="No earlier call of these ranks was read.")
    paths: list[str] = Field(default_factory=list)
