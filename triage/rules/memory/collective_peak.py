"""oom.collective_peak: the OOM happens while gathering parameters or tensors across ranks."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.signatures.memory import format_size
from triage.readers.stacks import user_frame
from triage.registry import EvidenceSet, rule
from triage.rules.memory._oom_events import collective_frame, evidence_of, first_location
from triage.rules.memory._oom_view import oom_view

FIX = (
    "Lower the gather peak: FSDP with reshard_after_forward=True / FULL_SHARD, "
    "limit_all_gathers=True and smaller wrapping units (fewer parameters unsharded at once), no "
    "forward prefetch; DeepSpeed ZeRO-3 with smaller stage3_max_live_parameters and "
    "stage3_prefetch_bucket_size; for state dicts use SHARDED_STATE_DICT, or FULL_STATE_DICT "
    "with offload_to_cpu=True and rank0_only=True; gather outputs to CPU or keep them sharded "
    "instead of all_gather of full tensors on every rank."
)
CONFIRM = (
    "the OOM traceback or the snapshot's failed allocation passes through all_gather / FSDP "
    "unshard / ZeRO-3 parameter gathering"
)


@rule("memory.collective_peak", "oom.collective_peak")
def collective_peak(evidence: EvidenceSet) -> Iterator[Finding]:
    """The OOM happens while parameters or tensors are gathered from all ranks.

    What it detects:
    A CUDA OOM whose traceback passes through an all_gather, FSDP's unshard
    (_all_gather_flat_param, _unshard, summon_full_params), ZeRO-3's parameter gathering, or
    DTensor's full_tensor; or a memory snapshot whose failed allocation came from such a frame.

    Why it happens:
    Sharding saves memory only between gathers: an all_gather materialises the full tensor on
    every rank. FSDP that keeps parameters unsharded after forward, prefetches the next unit,
    or wraps too coarsely; ZeRO-3 with large live-parameter limits; full state dicts gathered
    on every rank; gathered model outputs or logits kept on the GPU.

    Evidence:
    Traceback frames of the OOM event; `read_memory` snapshots (frames of the OOM trace entry).

    Fix:
    Reshard after forward, limit concurrent all-gathers and prefetch, smaller wrap units,
    sharded or CPU-offloaded state dicts, keep gathered outputs off the GPU.

    Known false positives:
    When everything already fills the GPU, the gather is only the last straw; then the
    oom.capacity numbers (allocated ≈ capacity before the gather) say the working set is too
    large.

    References:
    https://pytorch.org/docs/stable/fsdp.html;
    https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training
    """
    view = oom_view(evidence)
    gathering = [(e, f) for e in view.gpu if (f := collective_frame(e.frames)) is not None]
    if gathering:
        event, frame = gathering[0]
        events = [e for e, _ in gathering]
        numbers = event.numbers.describe()
        yield Finding(
            title="Out of memory while gathering across ranks",
            summary=(
                f"{view.label(events).capitalize()} ran out of GPU memory in {frame.function} "
                f"({frame.file.rsplit('/', 1)[-1]}:{frame.line}){event.where()}: gathered "
                "parameters or tensors exceed what the GPU has left."
                + (f" Numbers: {numbers}." if numbers else "")
            ),
            ranks=view.ranks(events),
            location=first_location(events),
            confidence=0.8,
            evidence=evidence_of(events),
            fix=FIX,
            confirm=CONFIRM,
        )
        return
    for ev, dump in view.dumps:
        gather = collective_frame(dump.oom_frames)
        if gather is None:
            continue
        requested = format_size(dump.oom_requested) if dump.oom_requested is not None else "?"
        user = user_frame(dump.oom_frames)
        yield Finding(
            title="Out of memory while gathering across ranks",
            summary=(
                f"The snapshot {ev.source} records the failed {requested} allocation in "
                f"{gather.function} ({gather.file.rsplit('/', 1)[-1]}:{gather.line}): the gather "
                "of parameters or tensors is the peak."
            ),
            ranks=[dump.rank] if dump.rank is not None else [],
            location=user.location() if user else None,
            confidence=0.75,
            evidence=[ev.id],
            fix=FIX,
            confirm=CONFIRM,
        )
        return
