"""oom.capacity: the working set does not fit on the GPU."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Evidence, Finding, Location
from triage.observations import MemoryDump
from triage.readers.signatures.memory import format_size
from triage.registry import EvidenceSet, rule
from triage.rules.memory._memory_usage import steady_rise
from triage.rules.memory._oom_events import (
    OomEvent,
    collective_frame,
    evidence_of,
    fragmented,
    had_room,
    held_by_others,
    judge,
    phase,
)
from triage.rules.memory._oom_view import oom_view

FIX = (
    "Shrink the per-GPU working set: a smaller micro-batch with gradient accumulation, "
    "activation checkpointing, bf16/fp16 mixed precision, and sharding of parameters, "
    "gradients and optimizer state (FSDP FULL_SHARD / ZeRO-3, or more GPUs); offload optimizer "
    "state to CPU when it is the optimizer step that fails. Measure with "
    "torch.cuda.max_memory_allocated() per step."
)
#: NCCL's own allocations (cuMem, outside torch's cache) when a communicator is set up.
FIX_NCCL = (
    "Leave NCCL room for its buffers, which it allocates outside PyTorch's cache when a"
    " communicator is set up (init_process_group with device_id, else the first collective of"
    " each group, and every new_group or DeviceMesh): create the process groups and run a first"
    " collective before the model and optimizer fill the GPU, release PyTorch's cache before"
    " making a group late (torch.cuda.empty_cache()), check that no other process holds the GPU"
    " (nvidia-smi), and shrink NCCL's share where it is large (NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS"
    " with many peers)."
)
FIX_SHARE = (
    "Set the engine's share (gpu_memory_utilization) to what is free when it starts: the CUDA"
    " context, NCCL's buffers and anything else on the GPU count against it (0.9 of a 22 GiB GPU"
    " leaves about 2 GiB for them); or free the GPU of other processes first (nvidia-smi)."
)
FIX_ENGINE = (
    "Give the engine's KV cache room: raise its share of the GPU (vLLM gpu_memory_utilization,"
    " SGLang --mem-fraction-static) when nothing else needs the GPU, lower max_model_len or"
    " max_num_seqs, or spread the weights over more GPUs (tensor parallel). Colocated with a"
    " trainer (RL rollouts), free or offload the trainer's weights, gradients and optimizer"
    " state before the engine starts or wakes, and lower its share to what the trainer leaves."
)
CONFIRM = (
    "the OOM message shows allocated ≈ reserved ≈ the GPU's capacity and the request exceeds "
    "free plus reserved-but-unallocated memory (nothing to defragment, no other process)"
)


def _score(event: OomEvent) -> tuple[float, str]:
    """How well 'the working set does not fit' explains this OOM, and why."""
    n = event.numbers
    if n.requested is not None and n.capacity is not None and n.requested > n.capacity:
        return 0.85, (
            f"a single allocation of {format_size(n.requested)} is larger than the whole GPU "
            f"({format_size(n.capacity)})"
        )
    core = n.core()
    if core is None:
        what = {
            "nccl": "NCCL could not allocate its buffers",
            "library": "a CUDA library could not allocate its workspace",
            "cuda": "a CUDA call ran out of memory",
            "engine": "the inference engine found no room for its KV cache within its share"
            " of the GPU",
            "engine_start": "the inference engine's share of the GPU is more than was free"
            " when it started",
        }.get(event.kind, "the GPU ran out of memory")
        if event.kind == "engine":
            return 0.6, f"{what}: the weights, the engine's budget and the context length"
        if event.kind == "engine_start":
            return 0.5, f"{what}: the CUDA context and whatever else is on the GPU count against it"
        return 0.35, f"{what}; the log has no allocator numbers to say why"
    if held_by_others(core):
        return 0.4, f"{format_size(core.held)} of the GPU is held outside this process"
    if fragmented(core) is not None:
        fill = core.allocated / max(1, core.capacity - core.held)
        return (0.5 if fill >= 0.8 else 0.35), (
            f"PyTorch holds {format_size(core.allocated)} of {format_size(core.capacity)}, but "
            f"{format_size(core.unallocated)} reserved-but-unallocated memory could have served "
            "the request had it been in one piece"
        )
    if had_room(core):
        return 0.25, (
            f"the GPU had {format_size(core.free)} free for a {format_size(core.requested)}"
            " request: not the working set; a memory cap (set_per_process_memory_fraction, a"
            " MIG or vGPU slice) or the driver refused it"
        )
    if core.free >= core.requested:
        return 0.5, (
            f"the request ({format_size(core.requested)}) is below the free memory "
            f"({format_size(core.free)}), yet CUDA could not serve it in one piece"
        )
    return 0.75, (
        f"PyTorch holds {format_size(core.allocated)} of {format_size(core.capacity)}; only "
        f"{format_size(core.free)} is free and {format_size(core.unallocated)} cached, not "
        f"enough for the {format_size(core.requested)} requested"
    )


@rule("memory.capacity", "oom.capacity")
def capacity(evidence: EvidenceSet) -> Iterator[Finding]:
    """A rank ran out of GPU memory because what it needs at its peak does not fit.

    What it detects:
    A CUDA OOM whose numbers show PyTorch holding nearly all of the GPU: allocated ≈ reserved
    ≈ capacity, and the request is larger than free plus reserved-but-unallocated memory, so
    neither defragmenting nor freeing other processes would make it fit; or a single request
    larger than the whole GPU. An inference engine (vLLM, SGLang) that finds no room for its
    KV cache within its share of the GPU, or (vLLM's start-up check, 0.5) less free than
    that share when it starts. A memory snapshot whose failed request exceeds every free byte
    of the cache says the same. Raw CUDA, cuBLAS and NCCL allocation failures without numbers
    are reported here with low confidence.

    Why it happens:
    Parameters, gradients, optimizer state (2 extra fp32 copies for Adam) and activations of
    the micro-batch exceed the GPU at the peak: usually the optimizer step (first step, when
    Adam's state is created), backward, or a forward with a long sequence. Data parallelism
    (DDP, ZeRO-1/2) keeps a full model replica per GPU.

    Evidence:
    `memory.cuda_oom` numbers (requested, capacity, free, allocated, reserved), the traceback's
    user frame and phase (forward / backward / optimizer step); `read_memory` snapshots (OOM
    request vs free blocks, top allocation sites).

    Fix:
    Reduce the per-GPU working set: smaller micro-batch plus gradient accumulation, activation
    checkpointing, mixed precision, FSDP/ZeRO-3 sharding or more GPUs, optimizer offload.
    When NCCL's own allocation failed (`NCCL WARN Cuda failure 'out of memory'`, no allocator
    numbers): leave it room when communicators are set up (groups made before the model fills
    the GPU, PyTorch's cache released before a late new_group, NCCL_BUFFSIZE). An inference
    engine: a larger share of the GPU, a shorter context, more tensor parallelism; beside a
    trainer, the trainer's state offloaded before the engine wakes.

    Known false positives:
    Without numbers (a bare `CUDA error: out of memory`) the cause is a guess; another process
    or a rank on the wrong GPU fills it just as well (see oom.other_process, oom.same_device).

    References:
    https://pytorch.org/docs/stable/notes/cuda.html#memory-management;
    https://pytorch.org/docs/stable/torch_cuda_memory.html
    """
    view = oom_view(evidence)
    best_log = judge((*_score(event), event) for event in view.gpu)
    dump_finding = _from_dumps(view.dumps)
    if best_log is None and dump_finding is None:
        return
    title, fix = "The working set does not fit in GPU memory", FIX
    if dump_finding is not None and (best_log is None or dump_finding[0] > best_log.confidence):
        confidence, summary, location, ids, ranks = dump_finding
    elif best_log is not None:
        confidence, event = best_log.confidence, best_log.event
        ranks = view.ranks(best_log.culprits)
        location = best_log.location
        stage = phase(event.frames)
        during = f" during {stage}" if stage else ""
        if stage and confidence >= 0.7 and collective_frame(event.frames) is None:
            confidence += 0.05  # a training phase at the peak: the usual shape of a too-big step
        if any(steady_rise(s) for s in view.usage if s.rank is None or s.rank in ranks):
            confidence = min(confidence, 0.6)  # it grew step over step first: see oom.leak
        numbers = event.numbers.describe()
        summary = view.ran_out(best_log, during) + (f" Numbers: {numbers}." if numbers else "")
        ids = evidence_of(best_log.culprits)
        if dump_finding is not None:
            ids += dump_finding[3]
        if event.kind == "nccl" and event.numbers.core() is None:
            title, fix = "NCCL ran out of GPU memory for its buffers", FIX_NCCL
        elif event.kind == "engine":
            title, fix = "The inference engine's KV cache does not fit its GPU budget", FIX_ENGINE
        elif event.kind == "engine_start":
            title, fix = "The inference engine's share of the GPU is more than is free", FIX_SHARE
    else:
        return
    yield Finding(
        title=title,
        summary=summary,
        ranks=ranks,
        location=location,
        confidence=round(confidence, 3),
        evidence=ids,
        fix=fix,
        confirm=CONFIRM,
    )


def _from_dumps(
    dumps: list[tuple[Evidence, MemoryDump]],
) -> tuple[float, str, Location | None, list[str], list[int]] | None:
    """A snapshot at the OOM whose cache holds less free memory than the failed request."""
    best: tuple[float, str, Location | None, list[str], list[int]] | None = None
    for ev, dump in dumps:
        if dump.oom_requested is None or dump.allocated is None or dump.reserved is None:
            continue
        if (dump.inactive or 0) >= dump.oom_requested or dump.allocated < 0.85 * dump.reserved:
            continue
        top = dump.top_sites[0] if dump.top_sites else None
        where = f"; most of it allocated at {top.frame.location()}" if top else ""
        summary = (
            f"The memory dump {ev.source} shows {format_size(dump.allocated)} live of "
            f"{format_size(dump.reserved)} reserved when a {format_size(dump.oom_requested)} "
            f"request failed{where}: the working set does not fit."
        )
        if best is None:
            ranks = [dump.rank] if dump.rank is not None else []
            best = (0.7, summary, top.frame.location() if top else None, [ev.id], ranks)
    return best
