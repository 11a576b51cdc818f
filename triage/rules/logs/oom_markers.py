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
    exceptions, CUDA_ERROR_OUT_OF_MEMORY, oom-kill, and a worker SIGKILLed
    (exitcode -9, "terminated with signal SIGKILL"), the OOM killer's signal.

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
