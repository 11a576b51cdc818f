"""The OOM rules' vocabulary: one out-of-memory error with its numbers and stacks, how
the numbers judge it, and how a rule picks the explanation it reports.

A CUDA OOM is reported several times over (the allocator's message, the exception line,
the traceback, torchelastic's error file); `_oom_view` merges them into one OomEvent per
error with the numbers of the message (in bytes, OomNumbers) and the traceback's frames,
so every rule reads the same facts and names the same rank and user line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from triage.models import Location
from triage.observations import Frame, TracebackRecord
from triage.readers.signatures.memory import format_size

GiB = 2**30
MiB = 2**20
_COLLECTIVE = re.compile(
    r"all_?gather|allgather|unshard|summon_full_params|full_tensor|gather_16bit|_gather_full"
    r"|reduce_scatter",
    re.IGNORECASE,
)
_SERIALIZATION = re.compile(r"(^|/)torch/serialization\.py$")
_SETUP = frozenset(
    {
        "init_process_group", "barrier", "_store_based_barrier", "new_group",
        "_verify_param_shape_across_processes", "_sync_module_states", "_sync_params_and_buffers",
        "set_device", "_lazy_init", "init_device_mesh",
    }
)  # fmt: skip
_OPTIM = re.compile(
    r"(^|/)torch/optim/|(^|/)apex/optimizers/|(^|/)deepspeed/ops/|(^|/)bitsandbytes/optim/"
)
_BACKWARD = frozenset({"backward", "_engine_run_backward", "run_backward"})


@dataclass(frozen=True)
class Core:
    """Requested, capacity, free, reserved, allocated, reserved-but-unallocated, and memory
    held outside this process, in bytes."""

    requested: int
    capacity: int
    free: int
    reserved: int
    allocated: int
    unallocated: int
    held: int


def fragmented(core: Core) -> float | None:
    """How strongly the numbers say 'fragmentation': enough cached-but-unallocated memory that,
    with what is free, the request would fit; None when they do not say it at all."""
    floor = max(core.capacity * 0.05, 256 * MiB)
    if core.unallocated < floor or core.free + core.unallocated < core.requested:
        return None
    if had_room(core):
        return None  # a new segment would have fit: the cache's pieces did not matter
    strong = core.unallocated >= core.requested and core.unallocated >= core.capacity * 0.1
    return 0.8 if strong else 0.6


def had_room(core: Core) -> bool:
    """CUDA reported free memory well above the request: neither the working set nor the
    cache's pieces explain the refusal (a memory cap, a MIG or vGPU slice, the driver)."""
    return core.free >= 2 * core.requested + 256 * MiB


def held_by_others(core: Core) -> bool:
    """Other processes hold enough of the GPU that without them the request would fit."""
    return core.held >= max(core.capacity * 0.15, GiB) and core.free + core.held >= core.requested


def siblings(others: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Other processes that look like ranks of one job: three or more, each about a CUDA
    context plus NCCL buffers (up to 2 GiB), with the same footprint within 10% (the same
    code on every rank). A stale job or a server rarely looks like that."""
    small = [(pid, used) for pid, used in others if 0 < used <= 2 * GiB]
    if len(small) < 3:
        return []
    sizes = [used for _, used in small]
    return small if max(sizes) <= min(sizes) * 1.1 else []


#: How far apart, per process, the pids of processes one launcher started in a row lie:
#: torchrun and mp.spawn start their workers one after the other, so their pids follow each
#: other, give or take the threads started between them. Unrelated processes' pids lie
#: thousands apart.
LAUNCH_PID_SPAN = 64


def launched_together(others: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Other processes holding memory whose pids one launch gave out in a row: two or more,
    within LAUNCH_PID_SPAN of each other per process. Ranks of one job, this one's or an
    earlier run's left behind."""
    holding = [(pid, used) for pid, used in others if used > 0]
    if len(holding) < 2:
        return []
    pids = [pid for pid, _ in holding]
    return holding if max(pids) - min(pids) <= LAUNCH_PID_SPAN * (len(pids) - 1) else []


@dataclass
class OomNumbers:
    """The allocator's numbers at the OOM, in bytes; None where the message omits one."""

    requested: int | None = None
    device: int | None = None
    capacity: int | None = None
    free: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    unallocated: int | None = None
    this_process: int | None = None
    processes: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> OomNumbers:
        def number(key: str) -> int | None:
            value = fields.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        processes = [
            (int(p["pid"]), int(p["used"]))
            for p in fields.get("processes") or []
            if isinstance(p, dict) and isinstance(p.get("used"), int)
        ]
        reserved, own = number("reserved"), number("this_process")
        if own is not None and reserved is not None and own < reserved:
            own = None  # NVML did not see the process (a container's pid namespace): "0 bytes"
        return cls(
            requested=number("requested"),
            device=number("device"),
            capacity=number("capacity"),
            free=number("free"),
            allocated=number("allocated"),
            reserved=reserved,
            unallocated=number("unallocated"),
            this_process=own,
            processes=processes,
        )

    def core(self) -> Core | None:
        """The numbers every judgement needs, when the message has all of them."""
        q, c, f, r, a = self.requested, self.capacity, self.free, self.reserved, self.allocated
        if q is None or c is None or f is None or r is None or a is None:
            return None
        unallocated = self.unallocated if self.unallocated is not None else max(0, r - a)
        return Core(q, c, f, r, a, unallocated, self.held_elsewhere() or 0)

    def self_pid(self) -> int | None:
        """NVML lists this process by pid when its pid namespace differs (containers): the
        listed process whose use is PyTorch's reserved memory plus a context is this one."""
        if self.this_process is not None or self.reserved is None:
            return None
        slack = max(2 * GiB, (self.capacity or 0) // 10)
        near = [
            (used - self.reserved, pid)
            for pid, used in self.processes
            if 0 <= used - self.reserved <= slack
        ]
        return min(near)[1] if near else None

    def others(self) -> list[tuple[int, int]]:
        """(pid, bytes) of the other processes the message lists on this GPU."""
        own = self.self_pid()
        return [(pid, used) for pid, used in self.processes if pid != own]

    def held_elsewhere(self) -> int | None:
        """Memory in use on the GPU that this process does not hold.

        Without the process's own total, its CUDA context, cuBLAS and NCCL buffers are
        counted elsewhere too; an allowance covers them.
        """
        if self.capacity is None or self.free is None or self.reserved is None:
            return None
        own = self.this_process
        if own is None:
            own_pid = self.self_pid()
            own = next((used for pid, used in self.processes if pid == own_pid), None)
        if own is not None:
            return max(0, self.capacity - self.free - own)
        allowance = max(GiB, self.capacity // 20)
        return max(0, self.capacity - self.free - self.reserved - allowance)

    def describe(self) -> str:
        """The numbers as one readable clause."""
        parts = []
        if self.requested is not None:
            parts.append(f"tried to allocate {format_size(self.requested)}")
        where = f" on GPU {self.device}" if self.device is not None else ""
        if self.capacity is not None and self.free is not None:
            parts.append(f"{format_size(self.free)} free of {format_size(self.capacity)}{where}")
        if self.allocated is not None and self.reserved is not None:
            parts.append(
                f"PyTorch: {format_size(self.allocated)} allocated, "
                f"{format_size(self.reserved)} reserved"
            )
        held = self.held_elsewhere()
        if held:
            parts.append(f"{format_size(held)} held outside this process")
        return "; ".join(parts)


@dataclass
class OomEvent:
    """One GPU out-of-memory error, however many lines reported it."""

    kind: str
    rank: int | None
    path: str
    line: int
    text: str
    evidence: list[str]
    numbers: OomNumbers
    pid: int | None = None
    host: str | None = None
    traceback: TracebackRecord | None = None
    local_rank: int | None = None

    @property
    def frames(self) -> list[Frame]:
        return self.traceback.frames if self.traceback else []

    @property
    def user_frame(self) -> Frame | None:
        return self.traceback.user_frame if self.traceback else None

    @property
    def location(self) -> Location | None:
        frame = self.user_frame
        return frame.location() if frame else None

    def who(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.local_rank is not None:
            return f"local rank {self.local_rank}"
        return "a process (rank not in the log)"

    def where(self) -> str:
        loc = self.location
        return f" at {loc}" if loc else ""


@dataclass
class HostEvent:
    """A sign the host, not the GPU, ran out of memory; `strength` is how sure it is."""

    signature: str
    rank: int | None
    strength: float
    text: str
    evidence: str


@dataclass
class Judged:
    """The OOM a rule explains best, and every OOM it explains nearly as well (the culprits)."""

    confidence: float
    why: str
    event: OomEvent
    culprits: list[OomEvent]

    @property
    def location(self) -> Location | None:
        return self.event.location or first_location(self.culprits)


def judge(scored: Iterable[tuple[float, str, OomEvent]]) -> Judged | None:
    """The best-explained OOM (the first of equals) and those within 0.15 of it."""
    items = list(scored)
    if not items:
        return None
    confidence, why, event = max(items, key=lambda s: s[0])
    culprits = [e for c, _, e in items if c >= confidence - 0.15]
    return Judged(confidence, why, event, culprits)


#: One explanation an OOM rule weighs: confidence, summary, culprit ranks, user line, evidence.
Scored = tuple[float, str, list[int], Location | None, list[str]]


def strongest(candidates: list[Scored], *extra: str) -> tuple[Scored, list[str]]:
    """The most confident explanation (the first of equals) and the evidence to cite: its
    own, then `extra`, then what the weaker explanations saw (16 at most)."""
    best = max(candidates, key=lambda c: c[0])
    own = best[4] + list(extra)
    return best, (own + [i for c in candidates for i in c[4] if i not in own])[:16]


def phase(frames: list[Frame]) -> str | None:
    """Which part of the step allocated: the optimizer step, backward, or forward."""
    for frame in frames:
        name = frame.function.rsplit(".", 1)[-1]
        if _OPTIM.search(frame.file) or (name == "step" and "deepspeed/runtime/" in frame.file):
            return "the optimizer step"
        if name in _BACKWARD:
            return "backward"
    if any(f.function.rsplit(".", 1)[-1] in ("forward", "_call_impl") for f in frames):
        return "forward"
    return None


def collective_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame that gathers parameters or tensors across ranks."""
    return next((f for f in frames if _COLLECTIVE.search(f.function)), None)


def loads_checkpoint(frames: list[Frame]) -> bool:
    """The OOM happened while torch.load restored tensors to the device they were saved on."""
    return any(_SERIALIZATION.search(f.file) for f in frames)


def in_setup(frames: list[Frame]) -> Frame | None:
    """The process-group or DDP set-up frame the OOM happened under, if any: ranks that
    never chose their GPU all create their CUDA context and NCCL buffers on GPU 0 there."""
    return next((f for f in frames if f.function.rsplit(".", 1)[-1] in _SETUP), None)


def first_location(events: Iterable[OomEvent]) -> Location | None:
    return next((e.location for e in events if e.location is not None), None)


def evidence_of(events: Iterable[OomEvent], limit: int = 12) -> list[str]:
    out: list[str] = []
    for event in events:
        out += [e for e in event.evidence if e not in out]
    return out[:limit]


def int_field(fields: dict[str, Any], key: str) -> int | None:
    """A signal field that is an integer (not a bool), else None."""
    value = fields.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
