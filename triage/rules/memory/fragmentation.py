"""oom.fragmentation: the cache holds enough free memory, but not in one piece."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Evidence, Finding
from triage.observations import MemoryDump
from triage.readers.signatures.memory import format_size
from triage.registry import EvidenceSet, rule
from triage.rules.memory._oom_events import (
    GiB,
    OomEvent,
    Scored,
    evidence_of,
    fragmented,
    judge,
    strongest,
)
from triage.rules.memory._oom_view import oom_view

FIX = (
    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torch >= 2.1; before that "
    "max_split_size_mb:128 or similar) so freed memory can be reused for larger requests; keep "
    "tensor shapes stable across steps (pad variable-length batches to a few bucket sizes); "
    "avoid holding a few small tensors alive inside large freed regions."
)
CONFIRM = (
    "a memory snapshot at the OOM shows free (inactive) blocks adding up to more than the "
    "failed request while the largest one is smaller, or the OOM message's 'reserved but "
    "unallocated' is at least the request"
)


def _score(event: OomEvent) -> tuple[float, str] | None:
    core = event.numbers.core()
    strength = fragmented(core) if core is not None else None
    if core is None or strength is None:
        return None
    enough = (
        "more than" if core.unallocated >= core.requested else "with the free memory, enough for"
    )
    return strength, (
        f"{format_size(core.unallocated)} is reserved by PyTorch but unallocated, {enough} "
        f"the {format_size(core.requested)} requested: free memory is split into pieces too "
        "small for it"
    )


@rule("memory.fragmentation", "oom.fragmentation")
def fragmentation(evidence: EvidenceSet) -> Iterator[Finding]:
    """The caching allocator holds enough free memory for the request, split into pieces.

    What it detects:
    A CUDA OOM whose 'reserved but unallocated' memory (reserved - allocated) is a large share
    of the GPU and, with what CUDA reports free, would cover the request; a snapshot whose
    free blocks add up to more than the failed request while the largest one is smaller; or
    memory_stats with large inactive_split_bytes (free bytes stuck inside partly used
    segments), especially with alloc retries; weaker (0.45), a memory_summary() table that
    counts an OOM, without its non-releasable row, whose reserved memory is at least twice
    what is allocated.

    Why it happens:
    The allocator splits cached segments to serve smaller requests and can only return whole
    segments to CUDA. Shapes that change every step (variable sequence lengths, dynamic
    batches) leave slivers that fit nothing large; a few long-lived tensors pin big segments.

    Evidence:
    `memory.cuda_oom` numbers (unallocated vs requested); `read_memory` snapshots (largest free
    block vs the OOM request, free bytes inside split segments) and memory_stats
    (inactive_split_bytes, num_alloc_retries).

    Fix:
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb on torch < 2.1),
    stable tensor shapes (bucketed padding), fewer long-lived small tensors.

    Known false positives:
    When allocated memory alone is close to capacity the working set does not fit either;
    oom.capacity is reported beside this one with what separates them.

    References:
    https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf
    """
    view = oom_view(evidence)
    candidates: list[Scored] = []
    best = judge((*found, event) for event in view.gpu if (found := _score(event)) is not None)
    if best is not None:
        summary = f"{view.ran_out(best)} Numbers: {best.event.numbers.describe()}."
        culprits = best.culprits
        candidates.append(
            (best.confidence, summary, view.ranks(culprits), best.location, evidence_of(culprits))
        )
    candidates += [hit for ev, dump in view.dumps if (hit := _from_dump(ev, dump))]
    if not candidates:
        return
    (confidence, summary, ranks, location, _), cited = strongest(candidates)
    yield Finding(
        title="Allocator fragmentation: free memory exists, but not in one piece",
        summary=summary,
        ranks=ranks,
        location=location,
        confidence=round(confidence, 3),
        evidence=cited,
        fix=FIX,
        confirm=CONFIRM,
    )


def _from_dump(ev: Evidence, dump: MemoryDump) -> Scored | None:
    ranks = [dump.rank] if dump.rank is not None else []
    site = dump.top_sites[0].frame.location() if dump.top_sites else None
    free, largest = dump.inactive or 0, dump.largest_free_block
    if dump.oom_requested is not None and largest is not None:
        if free >= dump.oom_requested > largest:
            return (
                0.85,
                (
                    f"The snapshot {ev.source} holds {format_size(free)} of free blocks, more than "
                    f"the {format_size(dump.oom_requested)} request that failed, but the largest is "
                    f"{format_size(largest)}: the free memory is fragmented."
                ),
                ranks,
                site,
                [ev.id],
            )
        return None
    split, reserved = dump.inactive_split or 0, dump.reserved or 0
    if reserved and split >= max(reserved * 0.25, GiB):
        retries = dump.num_alloc_retries or 0
        confidence = 0.65 if retries or dump.num_ooms else 0.55
        return (
            confidence,
            (
                f"{ev.source}: {format_size(split)} of the {format_size(reserved)} reserved is free "
                f"but stuck inside partly used segments"
                + (f", and the allocator had to retry {retries} allocations" if retries else "")
                + "."
            ),
            ranks,
            site,
            [ev.id],
        )
    unused = dump.inactive or 0
    if dump.inactive_split is None and dump.num_ooms and unused >= max(reserved * 0.5, GiB):
        # a table without its non-releasable row: reserved against allocated is all it says,
        # and it was printed after the OOM, when the failed step's tensors may be freed
        return (
            0.45,
            (
                f"{ev.source}: the table counts {dump.num_ooms} OOM(s) with"
                f" {format_size(unused)} of the {format_size(reserved)} reserved unallocated"
                + (
                    f" (peak allocated {format_size(dump.peak_allocated)})"
                    if dump.peak_allocated
                    else ""
                )
                + ": the cache held much more than the tensors in it."
            ),
            ranks,
            site,
            [ev.id],
        )
    return None
