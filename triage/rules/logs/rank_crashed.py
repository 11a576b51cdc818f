"""hang.rank_exited from logs, as a last resort: a process crashed or exited with an error,
and nothing in the text says why."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import LogSignal
from triage.readers.signatures.hardware import KERNEL_FAULT_XIDS
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import (
    Signal,
    first_exception,
    ids,
    ranks_of,
    signals,
    stopped_by_scheduler,
)
from triage.text import rank_label

#: The launcher's own teardown of healthy workers: no failure of theirs.
_TEARDOWN_CODES = (-15, 143)
_CRASHES = (
    "process.crashed",
    "cuda.kernel_fault",
    "cuda.call_failed",
    "scheduler.task_exit",
    "scheduler.first_exit",
    "scheduler.node_failure",
    "scheduler.worker_died",
    "mpi.rank_ended",
)
_EXITS = ("elastic.worker_failed", "elastic.child_failed", "elastic.process_signal",
          "spawn.process_signal", "launcher.child_exit", "horovod.process_exit")  # fmt: skip


@rule("logs.rank_crashed", "hang.rank_exited", last_resort=True)
def rank_crashed(evidence: EvidenceSet) -> Iterator[Finding]:
    """A process crashed or exited with an error code, and no rule reads why.

    What it detects:
    The shell's, the C++ runtime's or Python's crash lines (`Segmentation fault`, `core
    dumped`, `terminate called after throwing`, `Fatal Python error:`), a CUDA kernel fault
    (illegal memory access, device-side assert; the driver's Xid 13, 31 or 43 for it) or any
    other failed CUDA call (`Failed:
    Cuda error attention.cu:455 'invalid argument'`), a node the scheduler or Ray lost
    (`DUE TO NODE FAILURE`, `The actor died because its node has died`), a worker Ray or
    the kubelet saw die (`Worker exit type: SYSTEM_ERROR`, `Back-off restarting failed
    container`), MPI's own reports of a rank that aborted or exited (`MPI_ABORT was invoked on
    rank 3`, `BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES`), srun's or mpirun's
    report of a task that
    exited with a code or a signal, torchrun's `failed (exitcode: N)`, when no other rule
    finds anything. It stands only then. A positive exit code beside a Python exception is
    that exception's exit (the text says why, and the exception rules read it), not read.

    Why it happens:
    The rank's own error is not in the text: a native crash (NCCL, a CUDA extension, a
    driver), a kernel that indexed out of bounds, or an exception on a rank whose output
    was not collected. Its peers then wait for it, or fail on its closed connections.

    Evidence:
    The crash or exit lines, with the rank or task they name.

    Fix:
    Get the crashed rank's own output: every rank's stderr (`torchrun --redirects 3 --tee
    3`, `srun --output=%t.log`), a core dump or `faulthandler` for native crashes, and
    CUDA_LAUNCH_BLOCKING=1 for CUDA faults so the failing kernel is named where it runs.

    A kernel's own assertion (`Loss.cu:245: nll_loss_forward_reduce_cuda_kernel_2d: ...
    Assertion `t >= 0 && t < n_classes` failed.`) names what the rank died on (0.45): an
    input outside the range the kernel checks (a label past the classes, an index past a
    tensor); the fix then says which input to look at.

    srun's `Killed` / `Terminated` for tasks of a job the scheduler stopped (its time limit,
    scancel) are the scheduler's own kills, not read.

    Known false positives:
    A crash that is itself a symptom (a peer's watchdog aborting after a timeout the text
    does not show).

    References:
    https://pytorch.org/docs/stable/elastic/errors.html
    """
    raised = first_exception(evidence) is not None
    stopped = stopped_by_scheduler(evidence)
    found = (
        [
            item
            for item in signals(evidence, *_CRASHES)
            if not (stopped and item[1].fields.get("how") in ("Killed", "Terminated"))
        ]
        + [
            item
            for item in signals(evidence, "hardware.gpu_lost")
            if item[1].fields.get("xid") in KERNEL_FAULT_XIDS
        ]
        + [
            item
            for item in signals(evidence, *_EXITS)
            if not _teardown(item[1]) and not (raised and _echoes_an_exception(item[1]))
        ]
    )
    if not found:
        return
    found.sort(key=lambda item: (item[1].path, item[1].line))
    ranks = ranks_of(s for _, s in found)
    who = rank_label(ranks) if ranks else "a process"
    cuda = [
        item
        for item in found
        if item[1].signature in ("cuda.kernel_fault", "cuda.call_failed", "hardware.gpu_lost")
    ]
    checked = next((s for _, s in cuda if s.fields.get("check")), None)
    if checked is not None:
        yield _kernel_check(who, ranks, checked, found)
        return
    lost = [s for _, s in found if s.signature == "scheduler.node_failure"]
    if lost:
        yield _node_lost(lost[0], found)
        return
    yield Finding(
        title=f"{who} crashed or exited with an error, and the text does not say why",
        summary=f"{_quote(found)}; no line before it names a cause, so its peers (if any"
        " waited) are victims and the crashed process's own output holds the answer.",
        ranks=ranks,
        confidence=0.2,
        evidence=ids(found[:8]),
        fix="Collect the crashed rank's own output: every rank's stderr (torchrun --redirects"
        " 3 --tee 3, srun --output=%t.log), and a core dump or faulthandler for a native crash"
        + (
            "; rerun with CUDA_LAUNCH_BLOCKING=1 so the CUDA fault is reported at the kernel"
            " that made it."
            if cuda
            else "."
        ),
        confirm="the crashed rank's stderr or core dump names the failing call",
    )


def _kernel_check(who: str, ranks: list[int], checked: LogSignal, found: list[Signal]) -> Finding:
    """A kernel's own assertion (ATen's CUDA_KERNEL_ASSERT) names the input it refused: the
    crash's cause is in the text, even with no traceback at the kernel's launch."""
    check, kernel = checked.fields["check"], checked.fields.get("kernel", "operator()")
    if kernel == "operator()":  # a lambda's kernel: its source file says more
        kernel = f"a kernel of {checked.fields.get('source', 'ATen')}"
    return Finding(
        title=f"{who} died on a CUDA kernel's own check: `{check}` failed in {kernel}",
        summary=f"A CUDA kernel checked its input and stopped the process: `{check}` failed in"
        f" {kernel} ({checked.path}:{checked.line}); the device-side assert ends the rank, and"
        " its peers (if any waited) are victims. The Python line reported with it may be a"
        " later call: CUDA reports kernel errors at the next synchronising call.",
        ranks=ranks,
        confidence=0.45,
        evidence=ids(found[:8]),
        fix="Find the input the check names in that rank's batch: a target outside [0,"
        " n_classes) in a loss (labels numbered from 1, an ignore value other than ignore_index,"
        " a head with fewer classes than the data), an index at or past a tensor's size in"
        " index_select/embedding (a token id at or above the vocabulary size: a tokenizer and"
        " model that disagree). Rerun with CUDA_LAUNCH_BLOCKING=1 for the Python line that"
        " launched the kernel.",
        confirm="the batch holds a value outside the range the check names (max label or token"
        " id against the model's size)",
    )


def _node_lost(line: LogSignal, found: list[Signal]) -> Finding:
    """A node the scheduler or Ray declared lost takes every rank on it: the job's failure
    is the node's, whatever its ranks or their peers print next."""
    host = line.fields.get("host")
    which = f"node {host}" if host else "a node"
    return Finding(
        title=f"the scheduler lost {which}, and every rank on it",
        summary=f"`{line.text.strip()[:160]}` ({line.path}:{line.line}): {which} stopped"
        " answering the scheduler, so its ranks are gone and their peers wait for them or lose"
        " their connections; the node's own logs (the kernel's, the GPU driver's) say why.",
        ranks=[],
        confidence=0.45,
        evidence=ids(found[:8]),
        fix="Drain the node and look at why it failed (`scontrol show node`, the slurmd log,"
        " `dmesg -T` and `nvidia-smi -q` on it: a GPU fallen off the bus, a kernel panic, the"
        " network); restart the job from its last checkpoint on healthy nodes.",
        confirm="`scontrol show node` gives the node's down reason, or Ray's dashboard its death",
    )


def _teardown(exit_line: LogSignal) -> bool:
    """An exit that says nothing of a worker's own failure: SIGKILL is the OOM killer's (the
    host-OOM rules read it), SIGTERM (-15, 143) torchrun's cleanup of the other workers. A
    launcher's exception reports the first worker that ended, so its SIGTERM came from
    outside and counts."""
    fields = exit_line.fields
    if exit_line.signature == "launcher.child_exit":
        return fields.get("signal") == "SIGKILL"
    return fields.get("exitcode") in _TEARDOWN_CODES or fields.get("signal") in (
        "SIGTERM",
        "SIGKILL",
    )


def _echoes_an_exception(exit_line: LogSignal) -> bool:
    """The launcher's word that a worker exited with a positive code (Python's exit after an
    uncaught exception), or torchrun's report without its code: the text then holds the
    exception (a signal is a crash of its own)."""
    code = exit_line.fields.get("exitcode")
    return (isinstance(code, int) and code > 0) or "report" in exit_line.fields


def _quote(found: list[Signal]) -> str:
    """The first line, cut, and the exit it reports where the cut lost it (a launcher's line
    holds the whole command before its exit status)."""
    first = found[0][1]
    text = first.text[:160]
    code, sig = first.fields.get("exitcode"), first.fields.get("signal")
    how = f"exit code {code}" if code is not None else str(sig) if sig else ""
    said = f", {how}" if how and len(first.text) > 160 else ""
    return f"`{text}` ({first.path}:{first.line}{said})"
