"""Views of log evidence that many rules share: signals by name, tracebacks, origin ranks,
and the choice among the explanations a rule weighs."""

from __future__ import annotations

import re
from collections.abc import Iterable

from triage.models import Evidence
from triage.observations import LogSignal, TracebackRecord
from triage.observations.log_lines import is_printed
from triage.readers.stacks import COLLECTIVE_OPS
from triage.registry import EvidenceSet

#: The launcher's and the interpreter's own exceptions: they report a stop, not its cause.
TEARDOWN_EXCEPTIONS = frozenset(
    {"KeyboardInterrupt", "SystemExit", "SignalException", "ChildFailedError"}
)

#: An exception that is a launcher's report of a worker's exit (mp.spawn's
#: ProcessExitedException, subprocess's CalledProcessError for the launched interpreter,
#: horovodrun's RuntimeError): the worker's own failure, where the text holds it, is another
#: exception.
_CHILD_EXIT = re.compile(
    r"^\s*process \d+ terminated with |^\s*Command '\['[^']*python"
    r"|^Horovod detected that one or more processes exited|^mpirun failed with exit code"
)


def reports_a_stop(record: TracebackRecord) -> bool:
    """The launcher's or the interpreter's own stop, not a failure of the code it ran."""
    return record.exception is not None and (
        record.exception.rsplit(".", 1)[-1] in TEARDOWN_EXCEPTIONS
        or _CHILD_EXIT.search(record.message) is not None
    )


#: Lines that describe the setup or the progress, not a failure: NCCL_DEBUG=INFO's, the
#: ranks and rows of nccl-tests, per-op COLL traces, a rank's own prints around collectives,
#: process-group setup announcements, nvidia-smi's rows (and every `printed.` line: `is_fact`).
FACTS = frozenset(
    {
        "setup.init_announced",
        "setup.init_completed",
        "smi.gpu_row",
        "smi.gpu_memory",
        "smi.process_row",
        "ps.stopped_process",
        "nccl.tests_rank",
        "nccl.tests_result",
        "hang.nccl_coll",
        "hang.progress_print",
        "eval.batch_metrics",
        "hang.native_wait",
        "hang.main_process_first",
        "nccl.version",
        "nccl.bootstrap_interface",
        "nccl.socket_interfaces",
        "nccl.ib_devices",
        "nccl.ib_absent",
        "nccl.network",
        "nccl.channel_p2p",
        "nccl.channel_shm",
        "nccl.channel_net",
        "nccl.env_override",
        "nccl.topology_file",
        "nccl.init",
        "nccl.comm_topology",
        "nccl.iommu",
        "fabric.nvls_setup",
        "c10d.store_listening",
        "gpu.topology_row",
        "gpu.consumer_card",
        # a training loop's own memory figures per step
        "memory.step_usage",
        "memory.deepspeed_usage",
        "memory.mm_usage",
        "memory.torchtune_usage",
    }
)

Signal = tuple[Evidence, LogSignal]

#: One explanation a rule weighs: confidence, what went wrong, the signals that show it, the fix.
Found = tuple[float, str, list[Signal], str]


#: A scheduler stopping the job (its time limit, scancel): it kills the tasks itself.
_SCHEDULER_STOPS = ("scheduler.time_limit", "scheduler.cancelled")


def stopped_by_scheduler(evidence: EvidenceSet) -> bool:
    """Whether the scheduler says it stopped the job: its tasks' kills are its own."""
    return bool(signals(evidence, *_SCHEDULER_STOPS))


def signals(evidence: EvidenceSet, *names: str) -> list[Signal]:
    """Signals whose signature is one of `names` (all signals when none are given)."""
    found = evidence.payloads(LogSignal)
    wanted = set(names)
    return [(e, s) for e, s in found if not wanted or s.signature in wanted]


def is_fact(signature: str) -> bool:
    """A line of the setup or the progress (FACTS), or a job's own print: not a failure."""
    return signature in FACTS or is_printed(signature)


def shows_failure(evidence: EvidenceSet, *, besides: frozenset[str] = frozenset()) -> bool:
    """Whether the text shows a failure: a traceback, or a line that is neither a fact
    (`is_fact`) nor one of `besides`."""
    if tracebacks(evidence, dumps=False):
        return True
    return any(
        not is_fact(s.signature) and s.signature not in besides for _, s in signals(evidence)
    )


def tracebacks(
    evidence: EvidenceSet, *, dumps: bool | None = None
) -> list[tuple[Evidence, TracebackRecord]]:
    """Tracebacks (dumps=False), stack dumps (dumps=True) or both (None)."""
    found = evidence.payloads(TracebackRecord)
    return [(e, t) for e, t in found if dumps is None or t.dump == dumps]


def first_exception(evidence: EvidenceSet) -> tuple[Evidence, TracebackRecord] | None:
    """The text's first ordinary exception (not the launcher's or the interpreter's own
    stop), where it was read; None when there is none."""
    errors = [
        (item, record)
        for item, record in tracebacks(evidence, dumps=False)
        if record.exception and not reports_a_stop(record)
    ]
    return min(errors, key=lambda found: (found[1].path, found[1].line)) if errors else None


def exception_line(record: TracebackRecord) -> tuple[str, str]:
    """The exception as `Type: message`, and ` at file:line` of its user frame ('' when it
    has none), for a finding's words."""
    text = f"{record.exception}: {record.message}".strip().rstrip(":")
    frame = record.user_frame
    return text, f" at {frame.file}:{frame.line}" if frame else ""


def ranks_of(items: Iterable[LogSignal | TracebackRecord]) -> list[int]:
    return sorted({i.rank for i in items if i.rank is not None})


def ids(items: Iterable[tuple[Evidence, object]]) -> list[str]:
    return [e.id for e, _ in items]


def strongest(found: list[Found]) -> tuple[Found, list[Signal]]:
    """The most confident explanation (the first of equals), and the signals of all of them
    to cite: the weaker explanations still support the finding."""
    return max(found, key=lambda f: f[0]), [item for _, _, items, _ in found for item in items]


def stacks_in_collectives(
    evidence: EvidenceSet,
) -> list[tuple[Evidence, TracebackRecord, str]]:
    """Stacks without an exception (or stopped by Ctrl-C or SIGTERM) whose torch.distributed
    frames include a collective, with that collective (the outermost: `broadcast_object_list`,
    not the `broadcast` it calls)."""
    out: list[tuple[Evidence, TracebackRecord, str]] = []
    for item, record in tracebacks(evidence):
        if (record.dump or record.exception is None) and (op := collective_of(record)) is not None:
            out.append((item, record, op))
    return out


def collective_of(record: TracebackRecord) -> str | None:
    """The outermost torch.distributed collective among a stack's frames, if any."""
    return next(
        (
            f.function
            for f in reversed(record.frames)
            if "torch/distributed/" in f.file and f.function in COLLECTIVE_OPS
        ),
        None,
    )
