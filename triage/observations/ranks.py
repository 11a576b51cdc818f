"""Live ranks: the job's processes and their classified stacks."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from triage.models import Location
from triage.observations.payload import Payload


class RankProcess(Payload):
    """A live process of the job and what its environment says about its place in it."""

    EVIDENCE_KIND: ClassVar[str] = "process"

    pid: int
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    group_rank: int | None = Field(
        default=None, description="Node index (torchrun GROUP_RANK, NODE_RANK, SLURM_NODEID)."
    )
    nodes: int | None = Field(default=None, description="Nodes of its Slurm step (SLURM_NNODES).")
    host: str
    node: str = Field(
        default="", description="The node name its collection gave (`triage collect`)."
    )
    launcher: str | None = Field(default=None, description="torchrun, mp.spawn, srun, ...")
    launcher_pid: int | None = None
    job_id: str | None = Field(default=None, description="TORCHELASTIC_RUN_ID or master addr:port.")
    slurm_job: str | None = Field(
        default=None, description="SLURM_JOB_ID[.SLURM_STEP_ID], as `--slurm-job` takes it."
    )
    debug_server_port: int | None = Field(
        default=None, description="TRIAGE_DEBUG_SERVER_PORT: the debug server it started."
    )
    master: str | None = None
    status: str = "running"
    cmdline: str = ""
    rank_source: str = Field(default="env", description="Where the rank came from.")


class MissingRank(Payload):
    """A rank the job should have that no live process holds."""

    EVIDENCE_KIND: ClassVar[str] = "missing_rank"

    rank: int | None = Field(default=None, description="Global rank, when it can be known.")
    local_rank: int | None = None
    world_size: int
    scope: str = Field(description="'host': it belongs on this host; 'job': may run elsewhere.")
    reason: str


class UnseenRanks(Payload):
    """Ranks of a job larger than this host that run elsewhere and were not inspected.
    Nothing says their processes are gone: they are never "missing" or "exited"."""

    EVIDENCE_KIND: ClassVar[str] = "unseen_ranks"

    ranks: list[int]
    world_size: int
    host: str = Field(description="The host that was inspected.")
    why: str = Field(description="What says the job is larger than this host.")
    reach: str = Field(description="The command that would reach them.")


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
    #: Another thread holds the GIL (a C call that never releases it): this one cannot run.
    gil_held = "gil_held"
    debugger = "debugger"
    stopped = "stopped"
    unknown = "unknown"

    @property
    def waits_on_peers(self) -> bool:
        return self in (RankActivity.collective, RankActivity.p2p, RankActivity.group_setup)


class RankState(Payload):
    """One rank's classified stack: the op it blocks in (if any) and the user frame."""

    EVIDENCE_KIND: ClassVar[str] = "stack"

    rank: int | None
    pid: int
    host: str = ""
    node: str = Field(
        default="", description="The node name its collection gave (`triage collect`)."
    )
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
