"""oom.other_process: memory on the GPU is held by a process outside this one."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.signatures.memory import format_size
from triage.registry import EvidenceSet, rule
from triage.rules.memory._oom_events import (
    GiB,
    OomEvent,
    evidence_of,
    held_by_others,
    judge,
    launched_together,
    siblings,
)
from triage.rules.memory._oom_view import oom_view

FIX = (
    "Find who holds the GPU: nvidia-smi --query-compute-apps=pid,used_memory --format=csv (or "
    "fuser -v /dev/nvidia*) on the rank's host, and stop stale jobs, zombie ranks of an "
    "earlier run, notebooks or servers on it; then let the scheduler isolate GPUs per job "
    "(exclusive-process compute mode, CUDA_VISIBLE_DEVICES) so it does not happen again."
)
CONFIRM = (
    "nvidia-smi on the host lists processes outside this job holding memory on that GPU, or "
    "capacity minus free is much more than the process's own use in the OOM message"
)


def _score(event: OomEvent) -> tuple[float, str] | None:
    core = event.numbers.core()
    if core is None:
        return None
    if not held_by_others(core):
        return None
    others = [(pid, used) for pid, used in event.numbers.others() if used >= GiB // 4]
    if others and len(siblings(event.numbers.others())) == len(event.numbers.others()):
        return 0.45, (  # the same small footprint on every one: the job's own ranks (same_device)
            f"{len(others)} other processes with the same footprint hold "
            f"{format_size(core.held)} of GPU {core_device(event)}; they look like this job's "
            "own ranks rather than another job"
        )
    if launched_together(event.numbers.others()):
        return 0.45, (  # workers of one launch: this job's ranks unless an earlier run's
            f"{format_size(core.held)} of GPU {core_device(event)} is held by processes whose "
            "pids follow each other: ranks of one launch, left behind by an earlier run if "
            "they are not this job's"
        )
    if others:
        listed = ", ".join(f"process {pid} holds {format_size(used)}" for pid, used in others[:4])
        return 0.8, (
            f"{format_size(core.held)} of GPU {core_device(event)} is in use outside this "
            f"process ({listed}); without it the {format_size(core.requested)} request would fit"
        )
    own = "this process's allocator" if event.numbers.this_process is None else "this process"
    return 0.65, (
        f"capacity {format_size(core.capacity)} minus free {format_size(core.free)} leaves "
        f"{format_size(core.held)} in use beyond {own} ({format_size(core.reserved)} reserved); "
        f"without it the {format_size(core.requested)} request would fit"
    )


def core_device(event: OomEvent) -> str:
    device = event.numbers.device
    return str(device) if device is not None else "?"


@rule("memory.other_process", "oom.other_process")
def other_process(evidence: EvidenceSet) -> Iterator[Finding]:
    """Another process holds the GPU's memory, so this one runs out early.

    What it detects:
    A CUDA OOM whose numbers leave a large part of the GPU unexplained by this process:
    capacity - free - this process's use (or PyTorch's reserved memory plus an allowance for
    the CUDA context) is at least 15% of the GPU and would make the request fit, or the
    message lists other processes with their memory (`Process N has X memory in use`; the
    entry that is this process seen from another pid namespace is recognised and skipped).

    Why it happens:
    A stale job or zombie ranks from an earlier run, a notebook, an inference server, or a
    second job scheduled onto the same GPU. When the other processes are ranks of the same
    job, the cause is oom.same_device instead.

    Evidence:
    `memory.cuda_oom` numbers: capacity, free, this process's use, the process list.

    Fix:
    Find the holders with nvidia-smi and stop them; isolate GPUs per job.

    Known false positives:
    Without the process's own total (torch < 2.1, or no NVML), its CUDA context, cuBLAS
    workspaces and NCCL buffers count as held elsewhere; an allowance of 1 GiB or 5% covers
    the usual sizes, large NCCL buffers can exceed it. Ranks of this job on the same GPU look
    the same from the numbers alone (see oom.same_device).

    References:
    https://docs.nvidia.com/deploy/nvidia-smi/index.html;
    https://pytorch.org/docs/stable/notes/cuda.html#memory-management
    """
    view = oom_view(evidence)
    best = judge((*found, event) for event in view.gpu if (found := _score(event)) is not None)
    if best is None:
        return
    yield Finding(
        title="Memory on the GPU is held by another process",
        summary=view.ran_out(best),
        ranks=view.ranks(best.culprits),
        location=best.location,
        confidence=round(best.confidence, 3),
        evidence=evidence_of(best.culprits),
        fix=FIX,
        confirm=CONFIRM,
    )
