"""What the OOM rules share: each rank's out-of-memory errors with their numbers and stacks.

A CUDA OOM is reported several times over: the allocator's message, the exception
line, the traceback, torchelastic's error file. The view merges them into one event
per error with the numbers of the message (in bytes) and the traceback's frames, so
every rule reads the same facts and names the same rank and user line.

Logs also carry the allocator's state in text: a memory_summary() table printed at the
OOM reads as one more memory dump, and the memory a training loop prints every step
becomes one series per writer, for the leak rule to see growth in (`_memory_usage`).
The events, their numbers and the judging helpers are `_oom_events`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from triage.models import Evidence
from triage.observations import LogSignal, MemoryDump, MemoryGrowth, TracebackRecord
from triage.readers.signatures.host_memory import HOST_OOM_SIGNALS
from triage.readers.signatures.memory import CUDA_OOM_SIGNALS
from triage.registry import EvidenceSet
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._signals import signals, stopped_by_scheduler, tracebacks
from triage.rules.memory._memory_usage import UsageSeries, usage_series
from triage.rules.memory._oom_events import HostEvent, Judged, OomEvent, OomNumbers, int_field
from triage.text import rank_label

_OOM_TEXT = re.compile(r"out of memory|OutOfMemoryError|_ALLOC_FAILED", re.IGNORECASE)
_KILL_SIGNALS = frozenset({"SIGKILL", "9"})
_FRAGMENT_GAP = 4  # a frame line, its source line, and a caret line or two


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
        usage=usage_series(evidence),
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
        if not (gpu or int_field(f, "num_ooms")):
            continue
        allocated, reserved = int_field(f, "allocated"), int_field(f, "reserved")
        unused = reserved - allocated if reserved is not None and allocated is not None else None
        device = int_field(f, "device")
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
            active=int_field(f, "active"),
            inactive=unused,
            inactive_split=int_field(f, "inactive_split"),
            peak_allocated=int_field(f, "peak_allocated"),
            peak_reserved=int_field(f, "peak_reserved"),
            segments=int_field(f, "segments"),
            num_ooms=int_field(f, "num_ooms"),
            num_alloc_retries=int_field(f, "num_alloc_retries"),
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


_KIND = {
    "memory.cuda_oom": "allocator",
    "memory.oom_exception": "exception",
    "memory.cuda_error_oom": "cuda",
    "memory.library_alloc_failed": "library",
    "memory.nccl_cuda_oom": "nccl",
    "memory.kv_cache_budget": "engine",
    "memory.engine_startup_free": "engine_start",
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
    "memory.oom_kill_record": 0.9,
    "memory.slurm_oom_kill": 0.9,
    "memory.limit_kill": 0.85,
    "memory.limit_touched": 0.4,
    "memory.oom_killer_invoked": 0.85,
    "memory.pinned_alloc_failed": 0.5,
    "memory.slurm_task_oom": 0.9,
    "memory.ray_oom": 0.85,
    "memory.container_oom": 0.9,
    "memory.cpu_allocator": 0.85,
    "memory.host_memory_error": 0.8,
    "memory.dataloader_killed": 0.8,
    "memory.bad_alloc": 0.7,
    "memory.enomem": 0.65,
    "memory.exit_137": 0.6,
    "memory.exit_sigkill": 0.6,
    "memory.shell_killed": 0.6,
    "memory.dataloader_exited": 0.5,
}


def _host_events(evidence: EvidenceSet) -> list[HostEvent]:
    out = []
    teardowns = [s for _, s in signals(evidence, "launcher.kills_own_tree")]
    for ev, sig in signals(evidence, *HOST_OOM_SIGNALS):
        if sig.signature == "memory.dataloader_killed" and sig.fields.get("signal") != "Killed":
            continue  # Bus error is /dev/shm, Segmentation fault a crash: not memory
        if sig.signature == "memory.shell_killed" and any(
            t.path == sig.path and t.line < sig.line for t in teardowns
        ):
            continue  # the launcher's own SIGKILL of its tree after a child failed
        out.append(
            HostEvent(sig.signature, sig.rank, _HOST_STRENGTH[sig.signature], sig.text, ev.id)
        )
    for ev, sig in signals(
        evidence,
        "elastic.worker_failed",
        "elastic.child_failed",
        "elastic.process_signal",
        "spawn.process_signal",
    ):
        if _killed(sig):
            out.append(HostEvent(sig.signature, sig.rank, 0.6, sig.text, ev.id))
    # srun's `tasks 0-7: Killed` and mpirun's `exited on signal 9`; a scheduler that stops a
    # job at its time limit or on scancel kills its tasks the same way, and says so
    if not stopped_by_scheduler(evidence):
        for ev, sig in signals(evidence, "scheduler.task_exit"):
            if _killed(sig) or sig.fields.get("how") == "Killed":
                out.append(HostEvent(sig.signature, sig.rank, 0.6, sig.text, ev.id))
    teardown = signals(evidence, "elastic.teardown")
    stopped = signals(evidence, "elastic.signal_received")  # the launcher itself was signalled
    if (
        teardown
        and not out
        and not stopped
        and not tracebacks(evidence)
        and not _failure_lines(evidence)
    ):
        # the launcher stopped its workers and no process printed why: one died without a
        # traceback, as a SIGKILL leaves it (the OOM killer's), or in native code
        ev, sig = teardown[0]
        out.append(HostEvent(sig.signature, None, 0.3, sig.text, ev.id))
    return out


def _failure_lines(evidence: EvidenceSet) -> bool:
    """Lines that report a failure of their own (a timeout, an NCCL error, an error-level
    line): the launcher's reports and facts (NCCL's set-up, nvidia-smi rows) aside."""
    return any(
        not s.signature.startswith("elastic.") for _, s in comm_view(evidence).failure_signals()
    )


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
