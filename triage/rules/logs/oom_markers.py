"""oom.unknown from logs: memory ran out (or a process was SIGKILLed), cause not named."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, signals
from triage.text import rank_label


@rule("logs.oom_markers", "oom.unknown")
def oom_markers(evidence: EvidenceSet) -> Iterator[Finding]:
    """The logs say memory ran out, in words no specific memory rule reads.

    What it detects:
    Generic out-of-memory markers: "out of memory" in any library's wording, OutOfMemory
    exceptions, CUDA_ERROR_OUT_OF_MEMORY, cuBLAS/cuDNN's STATUS_ALLOC_FAILED, oom-kill, and
    a worker SIGKILLed (exitcode -9, "terminated with signal SIGKILL"), the OOM killer's
    signal. Weaker (0.25), without those: cuBLAS/cuDNN's STATUS_NOT_INITIALIZED (the
    library's handle could not be created; its workspace is allocated then).

    Why it happens:
    The GPU or the host ran out of memory; the numbers that would say which (capacity,
    reserved, per-process use, the kernel's OOM report) are not in the text.

    Evidence:
    generic.out_of_memory lines, per rank.

    Fix:
    Find which memory ran out: the full CUDA OOM message with its numbers (or
    torch.cuda.memory_summary()), nvidia-smi during the run, and the kernel log (`dmesg -T |
    grep -i oom`) or the scheduler's report for a SIGKILL.

    Known false positives:
    SIGKILL also comes from schedulers (time limit, preemption) and from launchers stopping
    the remaining workers; a rule that names the cause outranks it.

    References:
    https://pytorch.org/docs/stable/torch_cuda_memory.html
    """
    found = signals(evidence, "generic.out_of_memory")
    if not found:
        yield from _library_init(evidence)
        return
    ranks = ranks_of(s for _, s in found)
    who = f" on {rank_label(ranks)}" if ranks else ""
    yield Finding(
        title=f"memory ran out{who}, which memory is not visible",
        summary=f"The logs show memory running out{who} (`{found[0][1].text[:160]}`), without"
        " the numbers that say whether the GPU or the host ran out, or why.",
        ranks=ranks,
        confidence=0.2,
        evidence=[e.id for e, _ in found][:8],
        fix="Find which memory ran out: the full CUDA OOM message (or"
        " torch.cuda.memory_summary()), nvidia-smi during the run, and `dmesg -T | grep -i oom`"
        " or the scheduler's report for a SIGKILL.",
        confirm="a CUDA OOM message with its numbers, or the kernel's OOM-killer line",
    )


def _library_init(evidence: EvidenceSet) -> Iterator[Finding]:
    """cuBLAS or cuDNN failing to create its handle, with no other memory word: the GPU's
    memory was most often full already; a CUDA build the card or driver lacks is the other
    reading, and the next step tells them apart."""
    found = signals(evidence, "generic.cuda_library_init")
    if not found:
        return
    ranks = ranks_of(s for _, s in found)
    who = f" on {rank_label(ranks)}" if ranks else ""
    yield Finding(
        title=f"cuBLAS/cuDNN could not start{who}: GPU memory full, or a CUDA mismatch",
        summary=f"A CUDA library failed to create its handle{who} (`{found[0][1].text[:160]}`):"
        " its workspace is allocated then, so a GPU already full (another process, or every"
        " rank on the same device) fails here first; a torch build for a CUDA the driver or"
        " the card does not support fails the same way.",
        ranks=ranks,
        confidence=0.25,
        evidence=[e.id for e, _ in found][:8],
        fix="Look at nvidia-smi while the job starts: if the GPU's memory is taken (by another"
        " process, or by several ranks on one GPU: torch.cuda.set_device(local_rank) before"
        " the model), free it or fix the device choice; if it is free, check that torch's CUDA"
        " build (torch.version.cuda) supports the card and the driver.",
        confirm="nvidia-smi during start-up shows the GPU's memory full, or free",
    )
