"""What the OOM rules share: each rank's out-of-memory errors with their numbers and stacks.

A CUDA OOM is reported several times over: the allocator's message, the exception
line, the traceback, torchelastic's error file. The view merges them into one event
per error with the numbers of the message (in bytes) and the traceback's frames, so
every rule reads the same facts and names the same rank and user line.

Logs also carry the allocator's state in text: a memory_summary() table printed at the
OOM reads as one more memory dump, and the memory a training loop prints every step
becomes one series per writer, for the leak rule to see growth in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from triage.models import Evidence, Location
from triage.observations import Frame, LogSignal, MemoryDump, MemoryGrowth, TracebackRecord
from triage.readers.signatures.memory import (
    CUDA_OOM_SIGNALS,
    HOST_OOM_SIGNALS,
    USAGE_SIGNALS,
    format_size,
)
from triage.registry import EvidenceSet
from triage.rules.logs._signals import signals, tracebacks
from triage.text import rank_label

GiB = 2**30
MiB = 2**20
_OOM_TEXT = re.compile(r"out of memory|OutOfMemoryError|_ALLOC_FAILED", re.IGNORECASE)
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
_KILL_SIGNALS = frozenset({"SIGKILL", "9"})
_FRAGMENT_GAP = 4  # a frame line, its source line, and a caret line or two


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
    strong = core.unallocated >= core.requested and core.unallocated >= core.capacity * 0.1
    return 0.8 if strong else 0.6


def held_by_others(core: Core) -> bool:
    """Other processes hold enough of the GPU that without them the request would fit."""
    return core.held >= max(core.capacity * 0.15, GiB) and core.free + core.held >= core.requested


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
        return cls(
            requested=number("requested"),
            device=number("device"),
            capacity=number("capacity"),
            free=number("free"),
            allocated=number("allocated"),
            reserved=number("reserved"),
            unallocated=number("unallocated"),
            this_process=number("this_process"),
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


@dataclass(frozen=True)
class UsagePoint:
    """One log line's memory figure, in bytes."""

    line: int
    step: int | None
    value: int
    evidence: str


@dataclass
class UsageSeries:
    """One writer's memory figure of one kind (allocated, reserved, ...), in log order."""

    path: str
    rank: int | None
    local_rank: int | None
    signature: str
    metric: str
    points: list[UsagePoint]

    def who(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.local_rank is not None:
            return f"local rank {self.local_rank}"
        return "the process"


_MIN_POINTS = 5
_NOISE = 64 * MiB  # below this a change is rounding or jitter ("10.2 GB" is +-50 MiB)


@dataclass(frozen=True)
class Rise:
    """How a series' floor rose: overall, and over its second half (still rising at the end)."""

    start: UsagePoint
    end: UsagePoint
    growth: int
    tail_start: UsagePoint
    tail_growth: int


def steady_rise(series: UsageSeries) -> Rise | None:
    """Steady growth of a rank's memory across its log lines, or None.

    A leak rises line after line and keeps rising until the end; warm-up (optimizer state,
    the cache filling) rises fast and stops; noise goes up and down; a big batch jumps once.
    So: at most a quarter of the lines lower than the one before; the floor (the least value
    from each line on, which one spike does not move) up by 1 GiB and 20%; and over the
    second half of the lines still up by 256 MiB, no single rise making two thirds of that,
    at least a quarter as fast as over the whole. Steps, else line numbers, measure how
    fast, so the lines a scan keeps from the start and the end of a long log compare fairly.
    """
    points = series.points
    n = len(points)
    if n < _MIN_POINTS:
        return None
    values = [p.value for p in points]
    if sum(1 for a, b in zip(values, values[1:], strict=False) if b < a - _NOISE) > (n - 1) // 4:
        return None
    floor = values[:]
    for i in range(n - 2, -1, -1):
        floor[i] = min(floor[i], floor[i + 1])
    growth = floor[-1] - floor[0]
    if growth < max(GiB, floor[0] // 5):
        return None
    tail = n - max(3, (n + 1) // 2)
    tail_growth = floor[-1] - floor[tail]
    jump = max(b - a for a, b in zip(floor[tail:], floor[tail + 1 :], strict=False))
    if tail_growth < 256 * MiB or jump * 3 > tail_growth * 2:
        return None
    xs = [p.line for p in points]
    steps = [p.step for p in points]
    if all(
        b is not None and a is not None and a < b for a, b in zip(steps, steps[1:], strict=False)
    ):
        xs = [p.step or 0 for p in points]
    span, tail_span = xs[-1] - xs[0], xs[-1] - xs[tail]
    if span <= 0 or tail_span <= 0 or tail_growth * span < 0.25 * growth * tail_span:
        return None
    start = values.index(floor[0])
    return Rise(points[start], points[-1], growth, points[tail], tail_growth)


@dataclass
class OomView:
    gpu: list[OomEvent]
    host: list[HostEvent]
    dumps: list[tuple[Evidence, MemoryDump]]
    growth: list[tuple[Evidence, MemoryGrowth]]
    job_pids: dict[int, int | None]
    usage: list[UsageSeries] = field(default_factory=list)

    def ranks(self, events: Iterable[OomEvent]) -> list[int]:
        return sorted({e.rank for e in events if e.rank is not None})

    def label(self, events: list[OomEvent]) -> str:
        ranks = self.ranks(events)
        if not ranks and len({e.who() for e in events}) == 1:
            return events[0].who()
        if ranks:
            return rank_label(ranks)
        return "the process" if len(events) == 1 else f"{len(events)} processes"

    def ran_out(self, judged: Judged, during: str = "") -> str:
        """A summary's opening: who ran out of GPU memory, at which user line, and why."""
        who = self.label(judged.culprits).capitalize()
        return f"{who} ran out of GPU memory{judged.event.where()}{during}: {judged.why}."


def oom_view(evidence: EvidenceSet) -> OomView:
    return evidence.derived("oom_view", lambda: _build(evidence))


def _build(evidence: EvidenceSet) -> OomView:
    gpu = _gpu_events(evidence)
    return OomView(
        gpu=gpu,
        host=_host_events(evidence),
        dumps=evidence.payloads(MemoryDump) + _summary_dumps(evidence, gpu),
        growth=evidence.payloads(MemoryGrowth),
        job_pids=_job_pids(evidence),
        usage=_usage_series(evidence),
    )


def _summary_dumps(evidence: EvidenceSet, gpu: list[OomEvent]) -> list[tuple[Evidence, MemoryDump]]:
    """The last memory_summary() table of each writer and device, when it was printed at an
    OOM (it counts one, or the logs hold one): a table from a healthy step shows the cache
    at work, not the state that failed. The request that failed comes from the writer's
    nearest OOM message."""
    last: dict[tuple[object, ...], tuple[Evidence, LogSignal]] = {}
    for ev, sig in signals(evidence, "memory.summary"):
        key = (sig.path, sig.rank, sig.local_rank, sig.pid, sig.fields.get("device"))
        if key not in last or last[key][1].line < sig.line:
            last[key] = (ev, sig)
    out = []
    for ev, sig in last.values():
        f = sig.fields
        if not (gpu or _count(f, "num_ooms")):
            continue
        allocated, reserved = _count(f, "allocated"), _count(f, "reserved")
        unused = reserved - allocated if reserved is not None and allocated is not None else None
        device = _count(f, "device")
        dump = MemoryDump(
            path=sig.path,
            format="memory_summary",
            # The index is the printing process's current device: every rank says 0 under
            # per-rank CUDA_VISIBLE_DEVICES and when none called set_device, so it stays in
            # the label and out of `device`, which says where a dump's memory lives.
            label=f"line {sig.line}" + (f", device {device}" if device is not None else ""),
            rank=sig.rank,
            allocated=allocated,
            reserved=reserved,
            active=_count(f, "active"),
            inactive=unused,
            inactive_split=_count(f, "inactive_split"),
            peak_allocated=_count(f, "peak_allocated"),
            peak_reserved=_count(f, "peak_reserved"),
            segments=_count(f, "segments"),
            num_ooms=_count(f, "num_ooms"),
            num_alloc_retries=_count(f, "num_alloc_retries"),
            oom_requested=_requested_near(sig, gpu),
        )
        out.append((ev, dump))
    return out


def _requested_near(sig: LogSignal, gpu: list[OomEvent]) -> int | None:
    """The size of the failed request in the OOM message closest to a table of the same
    writer (torch prints the message before the handler prints the table)."""
    near = [
        (abs(e.line - sig.line), e.numbers.requested)
        for e in gpu
        if e.path == sig.path and e.rank == sig.rank and e.numbers.requested is not None
    ]
    return min(near)[1] if near else None


def _count(fields: dict[str, Any], key: str) -> int | None:
    value = fields.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_USAGE_METRICS = ("allocated", "peak_allocated", "memory", "reserved", "peak_reserved")


def _usage_series(evidence: EvidenceSet) -> list[UsageSeries]:
    """Per-step memory lines grouped by writer, file and format; each group keeps the most
    telling figure its lines carry (allocated before peaks, reserved last)."""
    groups: dict[tuple[object, ...], list[tuple[Evidence, LogSignal]]] = {}
    for ev, sig in signals(evidence, *USAGE_SIGNALS):
        device = sig.fields.get("device")
        key = (sig.path, sig.rank, sig.local_rank, sig.pid, sig.signature, device)
        groups.setdefault(key, []).append((ev, sig))
    out = []
    for items in groups.values():
        items.sort(key=lambda pair: pair[1].line)
        metric = next(
            (
                m
                for m in _USAGE_METRICS
                if sum(_count(s.fields, m) is not None for _, s in items) * 5 >= len(items) * 4
            ),
            None,
        )
        if metric is None:
            continue
        points = [
            UsagePoint(s.line, _count(s.fields, "step"), value, ev.id)
            for ev, s in items
            if (value := _count(s.fields, metric)) is not None
        ]
        first = items[0][1]
        out.append(
            UsageSeries(first.path, first.rank, first.local_rank, first.signature, metric, points)
        )
    return out


_KIND = {
    "memory.cuda_oom": "allocator",
    "memory.oom_exception": "exception",
    "memory.cuda_error_oom": "cuda",
    "memory.library_alloc_failed": "library",
    "memory.nccl_cuda_oom": "nccl",
}


def _gpu_events(evidence: EvidenceSet) -> list[OomEvent]:
    """One event per OOM line (all signatures of a line merged), then per distinct error."""
    by_line: dict[tuple[str, int], OomEvent] = {}
    for ev, sig in signals(evidence, *CUDA_OOM_SIGNALS):
        key = (sig.path, sig.line)
        event = by_line.get(key)
        if event is None:
            event = by_line[key] = OomEvent(
                kind=_KIND[sig.signature],
                rank=sig.rank,
                path=sig.path,
                line=sig.line,
                text=sig.text,
                evidence=[],
                numbers=OomNumbers(),
                pid=sig.pid,
                host=sig.host,
                local_rank=sig.local_rank,
            )
        event.evidence.append(ev.id)
        if sig.signature == "memory.cuda_oom":
            event.kind, event.numbers = "allocator", OomNumbers.from_fields(sig.fields)
    every = tracebacks(evidence, dumps=False)
    records = [(e, t) for e, t in every if _is_oom_traceback(t)]
    attached: set[str] = set()
    for event in by_line.values():
        found = _traceback_for(event, records) or _fragments_above(event, every)
        if found is not None:
            event.traceback = found[1]
            event.evidence.append(found[0].id)
            attached.add(found[0].id)
    for ev, record in records:  # an OOM traceback whose message line no signature read
        if ev.id not in attached:
            by_line[(record.path, record.line)] = OomEvent(
                kind="exception",
                rank=record.rank,
                path=record.path,
                line=record.line,
                text=f"{record.exception or ''}: {record.message}".strip(": "),
                evidence=[ev.id],
                numbers=OomNumbers(),
                pid=record.pid,
                host=record.host,
                traceback=record,
                local_rank=record.local_rank,
            )
    return _distinct(sorted(by_line.values(), key=lambda e: (e.path, e.line)))


def _is_oom_traceback(record: TracebackRecord) -> bool:
    return bool(_OOM_TEXT.search(f"{record.exception or ''} {record.message}"))


def _traceback_for(
    event: OomEvent, records: list[tuple[Evidence, TracebackRecord]]
) -> tuple[Evidence, TracebackRecord] | None:
    """The traceback this OOM line ends: same file and writer, the closest one above it."""
    best: tuple[Evidence, TracebackRecord] | None = None
    for ev, record in records:
        if record.path != event.path or record.line > event.line:
            continue
        if event.rank is not None and record.rank not in (None, event.rank):
            continue
        if record.message and record.message[:60] not in event.text:
            continue
        if best is None or record.line > best[1].line:
            best = (ev, record)
    return best


def _fragments_above(
    event: OomEvent, every: list[tuple[Evidence, TracebackRecord]]
) -> tuple[Evidence, TracebackRecord] | None:
    """A pasted traceback without its header reads as loose frames: the run of them that ends
    right above the OOM line is its traceback (frames joined, innermost first)."""
    loose = sorted(
        (
            (ev, t)
            for ev, t in every
            if t.path == event.path
            and t.line < event.line
            and not t.exception
            and not t.message
            and t.rank in (None, event.rank)
        ),
        key=lambda pair: pair[1].line,
    )
    run: list[tuple[Evidence, TracebackRecord]] = []
    below = event.line
    for ev, record in reversed(loose):
        if below - record.line > _FRAGMENT_GAP:
            break
        run.append((ev, record))
        below = record.line
    if not run:
        return None
    frames = [f for _, record in run for f in record.frames]
    user = next((f for _, r in run for f in [r.user_frame] if f is not None), None)
    joined = run[-1][1].model_copy(update={"frames": frames, "user_frame": user})
    return run[0][0], joined


def _distinct(events: list[OomEvent]) -> list[OomEvent]:
    """The same error printed twice (log and error file, stdout and stderr) counts once."""
    seen: dict[tuple[object, ...], OomEvent] = {}
    for event in events:
        key = (event.rank, event.local_rank, event.pid, event.kind, event.text[:300])
        kept = seen.get(key)
        if kept is None:
            seen[key] = event
        else:
            kept.evidence += [e for e in event.evidence if e not in kept.evidence]
            kept.traceback = kept.traceback or event.traceback
    return list(seen.values())


_HOST_STRENGTH = {
    "memory.oom_killer": 0.9,
    "memory.slurm_oom_kill": 0.9,
    "memory.slurm_task_oom": 0.9,
    "memory.ray_oom": 0.85,
    "memory.container_oom": 0.9,
    "memory.cpu_allocator": 0.85,
    "memory.host_memory_error": 0.8,
    "memory.dataloader_killed": 0.8,
    "memory.bad_alloc": 0.7,
    "memory.enomem": 0.65,
    "memory.exit_137": 0.6,
    "memory.shell_killed": 0.6,
    "memory.dataloader_exited": 0.5,
}


def _host_events(evidence: EvidenceSet) -> list[HostEvent]:
    out = []
    for ev, sig in signals(evidence, *HOST_OOM_SIGNALS):
        if sig.signature == "memory.dataloader_killed" and sig.fields.get("signal") != "Killed":
            continue  # Bus error is /dev/shm, Segmentation fault a crash: not memory
        out.append(
            HostEvent(sig.signature, sig.rank, _HOST_STRENGTH[sig.signature], sig.text, ev.id)
        )
    for ev, sig in signals(
        evidence, "elastic.worker_failed", "elastic.child_failed", "elastic.process_signal"
    ):
        if _killed(sig):
            out.append(HostEvent(sig.signature, sig.rank, 0.6, sig.text, ev.id))
    return out


def _killed(sig: LogSignal) -> bool:
    """Exit code -9 or 137, or signal 9: SIGKILL, the OOM killer's signal."""
    fields = sig.fields
    return (
        fields.get("exitcode") in (-9, 137)
        or str(fields.get("signal")) in _KILL_SIGNALS
        or str(fields.get("signo")) == "9"
    )


def _job_pids(evidence: EvidenceSet) -> dict[int, int | None]:
    """Pids the logs tie to this job's ranks (NCCL prefixes, launcher reports)."""
    pids: dict[int, int | None] = {}
    for _, sig in signals(evidence):
        for pid in (sig.pid, sig.fields.get("pid")):
            if isinstance(pid, int):
                pids[pid] = sig.rank if sig.rank is not None else pids.get(pid)
    return pids


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
