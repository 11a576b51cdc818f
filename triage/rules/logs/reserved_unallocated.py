"""oom.fragmentation from logs: the caching allocator reserves far more than tensors use."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.signatures.memory import SUMMARY_TITLE, format_size
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, signals

GiB = 1 << 30
#: Reserved at least this many times what tensors hold, and at least MIN_GAP more.
RATIO = 1.5
MIN_GAP = 2 * GiB


@rule("logs.reserved_unallocated", "oom.fragmentation")
def reserved_unallocated(evidence: EvidenceSet) -> Iterator[Finding]:
    """GPU memory reserved by PyTorch's caching allocator far above what tensors hold.

    What it detects:
    A line giving both the memory allocated to tensors and the memory the caching
    allocator reserved (`Allocated: 60.9 GB  Reserved: 127 GB`, memory_allocated /
    memory_reserved prints, DeepSpeed's see_memory_usage MA/Max_MA/CA) where reserved is at
    least 1.5 times allocated and 2 GiB more: the largest such gap. Against DeepSpeed's
    peak allocated (Max_MA) the reading is firm; against the allocation of the moment it
    is weak, since the cache keeps what the step's peak needed.

    Why it happens:
    Blocks of many sizes (variable sequence lengths, tensors freed and reallocated in a
    changing order) split the allocator's fixed segments; free pieces too small for the
    next request stay reserved while new segments are allocated, until the GPU runs out.

    Evidence:
    memory.allocated_reserved or memory.deepspeed_usage lines.

    Fix:
    Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torch >= 2.1) for every rank; keep
    tensor shapes stable across steps (pad to a few bucket sizes).

    Weaker (0.35), DeepSpeed ZeRO-3's `27 pytorch allocator cache flushes since last step.
    this happens when there is high memory pressure`: cudaMalloc failed and the allocator
    freed its cache to retry, step after step.

    Known false positives:
    Reserved memory above the allocation of the moment is the cache doing its job when
    the step's peak (torch.cuda.max_memory_allocated) comes close to it. Cache flushes also
    come from a working set at the GPU's limit (oom.capacity) without any fragmentation.

    References:
    https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf
    """
    yield from _cache_flushes(evidence)
    best: tuple[int, bool, Signal] | None = None
    for signal in signals(evidence, "memory.allocated_reserved", "memory.deepspeed_usage"):
        fields = signal[1].fields
        if SUMMARY_TITLE in signal[1].text:  # memory_summary(): its peak is read elsewhere
            continue
        reserved = fields.get("reserved")
        peak = fields.get("peak_allocated")
        used = peak if isinstance(peak, int) else fields.get("allocated")
        if not isinstance(reserved, int) or not isinstance(used, int):
            continue
        gap = reserved - used
        if reserved >= RATIO * used and gap >= MIN_GAP and (best is None or gap > best[0]):
            best = (gap, isinstance(peak, int), signal)
    if best is None:
        return
    gap, against_peak, (item, found) = best
    used_word = "the peak allocated" if against_peak else "allocated"
    yield Finding(
        title=f"the allocator reserves {format_size(gap)} more than tensors use",
        summary=f"`{found.text[:200]}`: reserved is {format_size(gap)} above {used_word}, memory"
        " the caching allocator holds in pieces it does not reuse.",
        ranks=[found.rank] if found.rank is not None else [],
        confidence=0.5 if against_peak else 0.3,
        evidence=[item.id],
        fix="Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torch >= 2.1) for every"
        " rank; keep tensor shapes stable across steps (pad to a few bucket sizes).",
        confirm="torch.cuda.max_memory_allocated() stays well below memory_reserved(), and"
        " expandable_segments:True lowers reserved memory",
    )


def _cache_flushes(evidence: EvidenceSet) -> Iterator[Finding]:
    """DeepSpeed counting the allocator's retries (num_alloc_retries) between steps: each is a
    cudaMalloc that failed until the cache was emptied, memory at its limit."""
    flushes = signals(evidence, "memory.allocator_flushes")
    if not flushes:
        return
    most = max(flushes, key=lambda item: int(item[1].fields.get("flushes", 0)))[1]
    yield Finding(
        title="the allocator emptied its cache to find memory, step after step",
        summary=f"`{most.text.strip()[:200]}`: {most.fields.get('flushes', 'several')} times in"
        " a step a cudaMalloc failed until the caching allocator gave back what it held; the"
        " GPU is at its limit, and cached pieces too small to reuse make it worse.",
        ranks=sorted({s.rank for _, s in flushes if s.rank is not None}),
        confidence=0.35,
        evidence=[item.id for item, _ in flushes][:8],
        fix="Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True on every rank; if the"
        " flushes stay, lower the memory per step (micro-batch, sequence length, ZeRO-3's"
        " stage3_max_live_parameters / stage3_prefetch_bucket_size, activation checkpointing).",
        confirm="torch.cuda.memory_stats()['num_alloc_retries'] grows every step, and"
        " expandable_segments:True stops it",
    )
