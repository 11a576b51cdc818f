"""oom.same_device: several ranks allocate on one GPU."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from triage.models import Finding
from triage.readers.signatures.memory import format_size
from triage.registry import EvidenceSet, rule
from triage.rules.memory._oom_events import (
    GiB,
    OomEvent,
    Scored,
    evidence_of,
    first_location,
    in_setup,
    launched_together,
    loads_checkpoint,
    siblings,
    strongest,
)
from triage.rules.memory._oom_view import OomView, oom_view
from triage.text import format_ranks

FIX = (
    "Give every rank its own GPU before any CUDA work: torch.cuda.set_device(local_rank) (or "
    "init_process_group(device_id=torch.device('cuda', local_rank))), create tensors and "
    "models on torch.device('cuda', local_rank) rather than 'cuda' or 'cuda:0', and load "
    "checkpoints with torch.load(path, map_location='cpu') or map_location=f'cuda:{local_rank}'. "
    "Check that CUDA_VISIBLE_DEVICES is not the same single GPU for every rank."
)
CONFIRM = (
    "nvidia-smi shows several of the job's processes on one GPU, or the OOM traceback passes "
    "through torch.load's restore_location (a checkpoint restored to the GPU it was saved from)"
)


def _held(event: OomEvent) -> int | None:
    return event.numbers.held_elsewhere()


def _from_torch_load(view: OomView) -> Scored | None:
    loading = [e for e in view.gpu if loads_checkpoint(e.frames)]
    if not loading:
        return None
    event = loading[0]
    capacity, held = event.numbers.capacity, _held(event)
    if capacity is not None and held is not None and held < capacity * 0.15:
        confidence = 0.5  # nothing else on the GPU: a checkpoint too big for one rank
    else:
        confidence = 0.85
    held_text = f" while {format_size(held)} of the GPU is held elsewhere" if held else ""
    device = event.numbers.device
    on = f"GPU {device}" if device is not None else "the GPU it was saved from"
    summary = (
        f"{view.label(loading).capitalize()} ran out of memory inside torch.load{event.where()}: "
        f"the checkpoint's tensors were restored to {on}{held_text}. Without map_location "
        "every rank restores the saved tensors onto the device they were saved from (cuda:0), "
        "all at once."
    )
    return confidence, summary, view.ranks(loading), first_location(loading), evidence_of(loading)


def _from_shared_index(view: OomView) -> Scored | None:
    """Several ranks of the job report their OOM on the same GPU index."""
    by_device: dict[int, list[OomEvent]] = defaultdict(list)
    for event in view.gpu:
        if event.rank is not None and event.numbers.device is not None:
            by_device[event.numbers.device].append(event)
    ranked = {e.rank for e in view.gpu if e.rank is not None}
    for device, events in sorted(by_device.items(), key=lambda kv: -len(kv[1])):
        ranks = view.ranks(events)
        hosts = {e.host for e in events if e.host}
        if len(ranks) < 2 or len(hosts) > 1 or len(ranks) * 2 <= len(ranked):
            continue
        held = [(h, e.numbers.capacity or 0) for e in events if (h := _held(e)) is not None]
        crowded = [h for h, capacity in held if h >= max(GiB, capacity // 10)]
        summary = (
            f"Ranks {format_ranks(ranks)} all ran out of memory on GPU {device}: they share one "
            "device instead of one GPU each"
            + (f" ({format_size(max(crowded))} held by the others)" if crowded else "")
            + "."
        )
        # With CUDA_VISIBLE_DEVICES set per rank every rank sees its own GPU as GPU 0; only
        # memory held by others on it tells a shared GPU apart.
        confidence = 0.8 if crowded else 0.6 if not held else 0.4
        return confidence, summary, ranks, first_location(events), evidence_of(events)
    return None


def _from_listed_ranks(view: OomView) -> Scored | None:
    """The OOM message lists processes on the GPU that the logs show are ranks of this job."""
    for event in view.gpu:
        peers = [(pid, used) for pid, used in event.numbers.others() if pid in view.job_pids]
        if not peers:
            continue
        names = ", ".join(
            f"pid {pid}"
            + (f" (rank {view.job_pids[pid]})" if view.job_pids[pid] is not None else "")
            + f" {format_size(used)}"
            for pid, used in peers
        )
        device = event.numbers.device
        summary = (
            f"{event.who().capitalize()} ran out of memory on GPU {device}{event.where()} while "
            f"other processes of the same job hold memory on it: {names}."
        )
        ranks = sorted(
            {r for r in [event.rank, *(view.job_pids[p] for p, _ in peers)] if r is not None}
        )
        return 0.9, summary, ranks, event.location, event.evidence
    return None


def _from_setup(view: OomView) -> Scored | None:
    """An OOM while the process group or DDP is being set up, before training allocated much:
    typical of ranks that all create their context and NCCL buffers on GPU 0."""
    for event in view.gpu:
        frame = in_setup(event.frames)
        if frame is None:
            continue
        held, capacity = _held(event) or 0, event.numbers.capacity
        crowded = capacity is not None and held >= capacity * 0.15
        summary = (
            f"{event.who().capitalize()} ran out of GPU memory in {frame.function}"
            f"{event.where()}, while setting up the process group or DDP"
            + (f", with {format_size(held)} of the GPU held by other processes" if crowded else "")
            + ": ranks that never called set_device all start on GPU 0."
        )
        ranks = view.ranks([event])
        return (0.7 if crowded else 0.55), summary, ranks, event.location, event.evidence
    return None


def _from_context(view: OomView) -> Scored | None:
    """An OOM inside torch.cuda.empty_cache(): it frees memory and allocates none, so the
    only thing that can run out there is its CUDA context being created, on the current
    device, GPU 0 in a process that never chose one."""
    for event in view.gpu:
        frame = next((f for f in event.frames if f.function == "empty_cache"), None)
        if frame is None or "torch/cuda" not in frame.file:
            continue
        summary = (
            f"{event.who().capitalize()} ran out of GPU memory inside torch.cuda.empty_cache()"
            f"{event.where()}, which allocates nothing but a CUDA context: this process had not"
            " used CUDA yet and made its context on the current device, GPU 0 unless it called"
            " set_device, where the other processes' contexts and memory already were."
        )
        return 0.55, summary, view.ranks([event]), event.location, event.evidence
    return None


def _from_stray_contexts(view: OomView) -> Scored | None:
    """Several small processes on the failing GPU: CUDA contexts (300-600 MiB each) that other
    ranks or their DataLoader workers created on it before (or without) set_device."""
    for event in view.gpu:
        alike = siblings(event.numbers.others())
        small = alike or [(pid, used) for pid, used in event.numbers.others() if used <= GiB]
        if len(small) < 2:
            continue
        device = event.numbers.device
        listed = ", ".join(f"{pid} ({format_size(used)})" for pid, used in small[:8])
        more = f" and {len(small) - 8} more" if len(small) > 8 else ""
        each = "the same footprint" if alike else "about a CUDA context"
        summary = (
            f"{event.who().capitalize()} ran out of memory on GPU {device}{event.where()}, where "
            f"{len(small)} other processes each hold {each}: {listed}{more}. Other ranks "
            f"or their workers touched GPU {device} before calling set_device."
        )
        confidence = 0.7 if alike else 0.5
        return confidence, summary, view.ranks([event]), event.location, event.evidence
    return None


def _from_launched_together(view: OomView) -> Scored | None:
    """The OOM message lists processes whose pids follow each other: workers one launcher
    started in a row, most often this job's other ranks on the rank's GPU."""
    for event in view.gpu:
        together = launched_together(event.numbers.others())
        if not together:
            continue
        device = event.numbers.device
        listed = ", ".join(f"{pid} ({format_size(used)})" for pid, used in together[:8])
        summary = (
            f"{event.who().capitalize()} ran out of memory on GPU {device}{event.where()}, where "
            f"{len(together)} other processes hold memory whose pids follow each other "
            f"({listed}): workers started by one launcher, this job's other ranks on the same "
            "GPU (or an earlier run's ranks left behind)."
        )
        return 0.55, summary, view.ranks([event]), event.location, event.evidence
    return None


def _from_dumps(view: OomView) -> Scored | None:
    """Memory snapshots of several ranks all hold memory on the same device index."""
    by_device: dict[int, set[int]] = defaultdict(set)
    ids: dict[int, list[str]] = defaultdict(list)
    for ev, dump in view.dumps:
        if dump.rank is not None and dump.device is not None and (dump.allocated or 0) > 0:
            by_device[dump.device].add(dump.rank)
            ids[dump.device].append(ev.id)
    ranked = {d.rank for _, d in view.dumps if d.rank is not None}
    for device, ranks in by_device.items():
        if len(ranks) >= 2 and len(ranks) * 2 > len(ranked):
            summary = (
                f"The memory snapshots of ranks {format_ranks(ranks)} all hold memory on "
                f"device {device}: the ranks allocate on one GPU."
            )
            return 0.75, summary, sorted(ranks), None, ids[device]
    return None


@rule("memory.same_device", "oom.same_device")
def same_device(evidence: EvidenceSet) -> Iterator[Finding]:
    """Several ranks put their memory on the same GPU, so it fills although each rank fits.

    What it detects:
    An OOM raised inside torch.load's restore path (tensors restored to the GPU they were saved
    from); two or more ranks reporting their OOM on the same GPU index (on one host); an OOM
    message listing other processes that the logs show are ranks of the same job, or several
    small ones (stray CUDA contexts of other ranks), or other processes whose pids follow
    each other (workers of one launch); an OOM during process-group or DDP set-up
    (init_process_group, barrier, DDP's parameter broadcast); an OOM inside
    torch.cuda.empty_cache() (only its CUDA context can run out there); or memory snapshots of several
    ranks that all hold memory on one device index.

    Why it happens:
    No torch.cuda.set_device(local_rank) before the first CUDA call (every rank creates its
    context and tensors on cuda:0), `.cuda()`/'cuda' instead of the rank's device, LOCAL_RANK
    read wrongly (RANK used on multi-node jobs, argv vs env), or torch.load without
    map_location restoring a checkpoint saved from rank 0 onto cuda:0 in every rank.

    Evidence:
    `memory.cuda_oom` device index per rank and memory held elsewhere; the OOM traceback's
    frames in torch/serialization.py; `Process N has X memory in use` entries matched to the
    job's pids; `read_memory` snapshot devices per rank.

    Fix:
    torch.cuda.set_device(local_rank) first, explicit devices, torch.load(...,
    map_location='cpu' or the rank's device), correct CUDA_VISIBLE_DEVICES.

    Known false positives:
    Ranks on different hosts share GPU indexes legitimately, and with CUDA_VISIBLE_DEVICES set
    per rank every rank calls its GPU "GPU 0"; without memory held by others in the numbers,
    a shared index alone is weak evidence. A checkpoint larger than one GPU also fails
    inside torch.load (then nothing else holds the GPU and confidence is lower). Ranks an
    earlier run left behind also have pids in a row (oom.other_process stands beside it).

    References:
    https://pytorch.org/docs/stable/generated/torch.load.html (map_location);
    https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """
    view = oom_view(evidence)
    candidates = [
        found
        for found in (
            _from_listed_ranks(view),
            _from_torch_load(view),
            _from_shared_index(view),
            _from_setup(view),
            _from_context(view),
            _from_stray_contexts(view),
            _from_launched_together(view),
            _from_dumps(view),
        )
        if found is not None
    ]
    if not candidates:
        return
    (confidence, summary, ranks, location, _), cited = strongest(candidates)
    yield Finding(
        title="Several ranks allocate on the same GPU",
        summary=summary,
        ranks=ranks,
        location=location,
        confidence=round(confidence, 3),
        evidence=cited,
        fix=FIX,
        confirm=CONFIRM,
    )
