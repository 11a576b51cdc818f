"""Probe snapshots: the file format triage.probe writes, and the replica comparisons read from it."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import FailFast, Field

from triage.observations.payload import Payload
from triage.observations.ranks import Frame

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
    """One rank's in-process evidence at one call of triage.probe.snapshot(). Its lists
    stop at their first invalid item: a crafted file of millions of bad records must not
    cost an error object each."""

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
    groups: Annotated[list[GroupRecord], FailFast()] = Field(default_factory=list)
    meshes: Annotated[list[MeshRecord], FailFast()] = Field(default_factory=list)
    tensors: Annotated[list[TensorRecord], FailFast()] = Field(default_factory=list)
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
    stacks: Annotated[list[ThreadStack], FailFast()] = Field(default_factory=list)
    environment: dict[str, str] = Field(
        default_factory=dict, description="Launcher, NCCL_*, TORCH_* variables; secrets redacted."
    )
    errors: list[str] = Field(
        default_factory=list, description="What could not be gathered, one line each."
    )


class SnapshotSummary(Payload):
    """Evidence `probe_snapshot`: what one snapshot file holds, without the tensors."""

    EVIDENCE_KIND: ClassVar[str] = "probe_snapshot"

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

    EVIDENCE_KIND: ClassVar[str] = "replica_check"

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


class ProbeRequest(Payload):
    """Ranks asked for an in-process snapshot with triage.probe's signal, and what came back."""

    EVIDENCE_KIND: ClassVar[str] = "probe_request"

    sent: list[int] = Field(description="Pids signalled.")
    snapshot_files: list[str] = Field(default_factory=list)
    flight_recorder_files: list[str] = Field(
        default_factory=list, description="The Flight Recorder dumps the snapshots name."
    )
