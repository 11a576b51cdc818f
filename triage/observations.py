"""Typed payloads of the evidence kinds that tools produce and rules read.

Tools and rules never import each other; they meet here. Each Evidence item carries
the payload of its kind in `data`:

- `process`: RankProcess, `missing_rank`: MissingRank, `stack`: RankState (live ranks)
- `log_signal`: LogSignal, `traceback`: TracebackRecord, `log_file`: LogFile (logs)
- `environment`: EnvironmentFacts (a rank's environment or this host's facts)
- `memory_dump`: MemoryDump, `memory_growth`: MemoryGrowth (CUDA memory dumps)
- `fr_stuck`: FRStuckGroup, `fr_outlier`: FROutlier, `fr_p2p`: FRP2PWait,
  `fr_overview`: FROverview (Flight Recorder dumps)
- `probe_snapshot`: SnapshotSummary, `replica_check`: ReplicaCheck (triage.probe files)
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from triage.models import Contract, Location
from triage.text import format_ranks


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
    format: str = Field(
        description="'snapshot' (torch.cuda.memory._snapshot), 'memory_stats', or "
        "'memory_summary' (a torch.cuda.memory_summary() table in a log)."
    )
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


# --- Flight Recorder dumps (tools/read_flight_recorder.py) --------------------------------------------------------------------


class FROp(Payload):
    """One recorded op as the report shows it."""

    op: str
    seq: int
    p2p: bool = False
    group: str
    state: str
    done: bool = Field(default=False, description="Finished, or retired by the backend.")
    input_sizes: list[list[int]] = Field(default_factory=list)
    input_dtypes: list[str] = Field(default_factory=list)
    output_sizes: list[list[int]] = Field(default_factory=list)
    peer: int | None = Field(default=None, description="Global rank at the other end.")
    location: Location | None = Field(default=None, description="User line that called it.")
    text: str = ""


class FRSide(Payload):
    """Ranks of one group in one state at the group's stuck point."""

    state: str = Field(
        description="waiting (the majority, in the stuck op), other_op, other_shape, behind "
        "(not finished where others have), lagging (its GPU never started the op), entered, "
        "idle (never enqueued it, nothing pending), "
        "elsewhere (blocked in another op), no_dump, unreadable, unknown."
    )
    ranks: list[int]
    op: FROp | None = None
    waits_in: str | None = Field(default=None, description="'group:seq' or 'p2p' for elsewhere.")
    novel: bool = Field(
        default=False, description="Its op appears in none of the group's recent collectives."
    )

    def describe(self) -> str:
        """'ranks 1-3 wait in all_reduce seq 7 (pending) at train.py:40' and the like."""
        one = len(self.ranks) == 1
        who = f"rank{'' if one else 's'} {format_ranks(self.ranks)}"
        op = self.op
        text = op.text if op else None
        at = f" at {Path(op.location.file).name}:{op.location.line}" if op and op.location else ""
        wait, be, have = ("waits", "is", "has") if one else ("wait", "are", "have")
        what = {
            "waiting": f"finished {(text or '').removesuffix(' (finished)')}{at} and {wait} further on"
            if op and op.done
            else f"{wait} in {text or 'the collective'}{at}",
            "other_op": f"{be} in {text or 'another op'}{at} instead",
            "other_shape": f"entered it as {text or '?'}{at}: other sizes or dtypes",
            "lagging": f"enqueued it but {'its' if one else 'their'} GPU never started it{at}",
            "behind": f"{have} not finished it ({text or '?'}){at}",
            "entered": f"entered it{at}",
            "idle": f"never enqueued it and {wait} in no collective; last op {text or 'none'}{at}",
            "elsewhere": f"never enqueued it: blocked in {text or self.waits_in}{at}",
            "no_dump": "left no dump",
            "no_group": "never created this group (not in its dump's groups)",
            "unreadable": "left a dump that could not be read",
            "unknown": f"{have} no op of this group in {'its' if one else 'their'} buffer",
        }.get(self.state, self.state)
        return f"{who} {what}"


class FROutlier(Payload):
    """Ranks of one group that are not where the group's majority waits."""

    group: str
    desc: str = ""
    seq: int
    members: int
    world: int
    side: FRSide


class FRStuckGroup(Payload):
    """A process group whose oldest unfinished collective some members never reached."""

    group: str
    desc: str = ""
    members: int
    membership: str = Field(description="config (from the dumps), world, or observed.")
    world: int
    seq: int
    sides: list[FRSide]
    more_ranks: int = 0
    waits_on: list[str] = Field(default_factory=list)
    root: bool = Field(description="False when its outliers only wait in another stuck point.")

    def evidence_id(self) -> str:
        return f"fr:group{self.group}:seq{self.seq}"

    def side_evidence_id(self, side: FRSide) -> str:
        """The id of the outlier evidence the tool writes for `side`."""
        ranks = format_ranks(side.ranks)
        if len(ranks) > 40:
            ranks = f"{len(side.ranks)}ranks{side.ranks[0]}"
        return f"fr:group{self.group}:seq{self.seq}:{side.state}:{ranks}"


class FRP2PWait(Payload):
    """Ranks blocked in point-to-point ops that no peer matches."""

    ranks: list[int] = Field(description="Every rank waiting in it.")
    culprits: list[int] = Field(description="The cycle, or the rank at the end of the chain.")
    cycle: bool
    sink: int | None = None
    sink_state: str = ""
    ops: dict[int, FROp] = Field(default_factory=dict)


class FROverview(Payload):
    """What the dumps cover."""

    dumps: int
    ranks: str = Field(description="Ranks with a dump, compressed: '0-4095'.")
    world: int
    missing: list[int] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    backends: list[str] = Field(default_factory=list)
    groups: int
    stuck_groups: int
    entries: int
    files: list[str] = Field(default_factory=list, description="A few of the files read.")


# --- in-process probe snapshots (triage.probe) ------------------------------------------
#
# `triage.probe.snapshot()` writes one JSON file per rank and call, shaped like
# ProbeSnapshot (written with the standard library; validated here when read). The reader
# compares ranks and calls, and emits compact evidence (SnapshotSummary per file,
# ReplicaCheck per call), so rules never hold thousands of parameters of thousands of ranks.

PROBE_FORMAT: Literal["triage.probe/1"] = "triage.probe/1"
_PROBE_HEAD = re.compile(rb'"format"\s*:\s*"triage\.probe/1"')


def is_probe_snapshot(head: bytes) -> bool:
    """Whether a file's first bytes (a few KiB) are a probe snapshot's: the probe writes the
    format key first, so a JSON document that holds it near the start is one."""
    return head.lstrip()[:1] == b"{" and _PROBE_HEAD.search(head) is not None


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
        default=None,
        description="Path of the Flight Recorder dump, relative to the snapshot's folder: the"
        " signal path's dump, or one beside it (snapshot(flight_recorder=True)).",
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
    label: str = Field(default="", description="The call as the replica check names it.")
    reason: Literal["call", "signal"] = "call"
    host: str = ""
    pid: int | None = None
    backend: str | None = None
    model: str | None = None
    wrappers: list[str] = Field(default_factory=list)
    meshes: list[MeshRecord] = Field(
        default_factory=list, description="Left out when they hold hundreds of ranks."
    )
    parameters: int = 0
    buffers: int = 0
    grads: int = Field(default=0, description="Trainable parameters that hold a .grad.")
    optimizer: str | None = Field(default=None, description="The optimizer's class.")
    optimizer_state: int | None = Field(
        default=None, description="Tensors in the optimizer's state (0 before the first step)."
    )
    without_grad: list[str] = Field(
        default_factory=list, description="Trainable parameters with no .grad (bounded)."
    )
    without_grad_total: int = 0
    nonfinite: list[str] = Field(
        default_factory=list,
        description="Tensors or gradients with NaN/Inf (bounded), e.g. 'fc.weight (grad)'.",
    )
    nonfinite_total: int = 0
    user_frame: Frame | None = Field(
        default=None, description="Innermost user frame of the main thread at the snapshot."
    )
    flight_recorder: str | None = None
    errors: list[str] = Field(default_factory=list)


Divergence = Literal["value", "grad", "placements", "grad_presence", "nonfinite"]


class TensorDivergence(Payload):
    """One tensor that is not the same on every rank that should hold the same copy.

    `what` says how: `value`/`grad` checksums differ among replicas; `placements` differ
    across ranks or do not fit the mesh; `grad_presence`: a trainable parameter has no .grad
    on `ranks` while those ranks hold gradients of other parameters; `nonfinite`: NaN/Inf
    in `part` on `ranks` (listed even when most ranks have them).
    """

    name: str
    kind: Literal["parameter", "buffer"]
    what: Divergence
    part: Literal["value", "grad"] | None = Field(
        default=None, description="For nonfinite: in the values or in the gradients."
    )
    ranks: list[int] = Field(
        description="The outlier ranks (the minority, or all when no majority); bounded."
    )
    ranks_total: int = 0
    agreeing: list[int] = Field(
        default_factory=list, description="Ranks that agree with each other; bounded."
    )
    agreeing_total: int = 0
    majority: bool = Field(
        default=True, description="False: no copy is held by most replicas; all are listed."
    )
    dtensor: bool = Field(default=False, description="A DTensor: compared within replica groups.")
    max_relative_diff: float | None = Field(
        default=None, description="Largest |norm difference| / norm against the majority."
    )
    nonfinite: bool = Field(
        default=False, description="The outliers hold NaN/Inf here: that explains the difference."
    )
    since: str | None = Field(
        default=None, description="The first call read at which it differed this way."
    )
    matched_at: str | None = Field(
        default=None, description="The last earlier call at which the replicas were identical."
    )
    detail: str = ""


class WorldIssue(Payload):
    """The mesh or the ranks disagree with the world the snapshots report."""

    problem: Literal[
        "mesh_too_big", "mesh_ranks_outside", "mesh_short", "world_size_differs", "rank_outside"
    ]
    detail: str
    mesh: MeshRecord | None = None
    ranks: list[int] = Field(default_factory=list, description="Ranks that report it; bounded.")


class ReplicaCheck(Payload):
    """Evidence `replica_check`: ranks compared at one call (same call index or tag).

    Tensors are compared among ranks that should hold identical copies: all ranks for a
    plain or DDP replica, ranks of the same mesh coordinate on the other dims for DTensors
    (Replicate placements), never across shards.
    """

    call: int
    tag: str | None = None
    label: str = Field(default="", description="'step 3' (the tag) or 'call 1'.")
    ranks: list[int]
    world_size: int | None = None
    missing: list[int] = Field(
        default_factory=list, description="Ranks of the world with no snapshot at this call."
    )
    wrappers: list[str] = Field(default_factory=list, description="Wrappers any rank reports.")
    compared: int = Field(description="Tensors compared.")
    diverging: list[TensorDivergence] = Field(default_factory=list, description="Bounded.")
    diverging_total: int = 0
    counts: dict[str, int] = Field(
        default_factory=dict, description="Diverging tensors by `what`, before bounding."
    )
    ranks_with_grads: int = Field(
        default=0, description="Ranks holding any gradient (a backward ran since zero_grad)."
    )
    stepped: bool | None = Field(
        default=None,
        description="True: an optimizer that keeps state (Adam, SGD with momentum) holds some "
        "on a rank, so a step ran before this call; False: it holds none yet; None: unknown.",
    )
    partial: list[str] = Field(
        default_factory=list, description="Tensors held as Partial (pending reduction); bounded."
    )
    world_issues: list[WorldIssue] = Field(default_factory=list)
    first_call: bool = Field(description="No earlier call of these ranks was read.")
    notes: list[str] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list, description="Bounded.")
