"""oom.unknown from logs, as a last resort: a failure in memory's words that no rule reads."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._unexplained import last_resort


@rule("logs.unexplained_memory", "oom.unknown", last_resort=True)
def unexplained_memory(evidence: EvidenceSet) -> Iterator[Finding]:
    """The first failure no rule names speaks of memory or an allocation.

    What it detects:
    The text's first exception (or, without one, its first error line or line that says
    something failed) when no other rule finds anything and its words are memory's: memory,
    an allocation, OOM, RESOURCE_EXHAUSTED, in no transport's or wait's words. 0.12 with an
    exception, 0.08 with a line alone; any other finding replaces it.

    Why it happens:
    An allocation failed in words no signature knows (a library's own allocator, a
    platform this tool has no reading for), or the message was cut before its numbers.

    Evidence:
    The exception or the line, its rank and its innermost user frame.

    Fix:
    Read the memory at the failure: torch.cuda.memory_summary() on the failing rank,
    nvidia-smi of every GPU, and the kernel log (`dmesg`) for the OOM killer; then run
    triage on those.

    Known false positives:
    An exception that names memory but is a bug of its own (an invalid address, a pinned
    buffer's flag); a host's memory limit read as a device's.

    References:
    https://pytorch.org/docs/stable/notes/cuda.html#memory-management
    """
    found = last_resort(evidence, "oom")
    if found is not None:
        yield found
