"""oom.same_device from nvidia-smi's GPU rows alone: the first GPU holds far more memory than
the others, which hold alike."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, ids, signals
from triage.rules.memory.same_device import CONFIRM, FIX

#: How much more the first GPU must hold than the others' median, and at least how much
#: more in MiB: a rank 0 that logs or evaluates holds a little more, not several times.
_FACTOR = 3.0
_EXTRA_MIB = 2048
#: How far apart the other GPUs may be and still hold "alike".
_SPREAD = 0.2


@rule("logs.smi_default_gpu", "oom.same_device")
def smi_default_gpu(evidence: EvidenceSet) -> Iterator[Finding]:
    """nvidia-smi shows the host's first GPU holding several times what each other GPU holds,
    and the others alike, with no process rows to say who holds it.

    What it detects:
    nvidia-smi's table: each GPU row and the memory line under it (`6520MiB / 10989MiB`).
    Three or more GPUs, the lowest-numbered holding more than three times the others'
    median and 2 GiB more, the others within 20% of each other. With process rows,
    logs.smi_shared_gpu reads who holds what instead.

    Why it happens:
    cuda:0 is every process's default device. Ranks that never call
    torch.cuda.set_device(local_rank) before their first CUDA work (a launcher that sets no
    LOCAL_RANK, such as mpirun; a checkpoint restored without map_location; a hard-coded
    'cuda') each create a context and tensors on GPU 0 besides their own GPU, which then
    runs out of memory first.

    Evidence:
    The GPU rows and their memory lines.

    Fix:
    One GPU per rank: set_device(LOCAL_RANK) before any CUDA work, map_location for
    checkpoints.

    Known false positives:
    Rank 0 doing more than the others on purpose (evaluation, gathering outputs or a full
    state dict onto it, a logger's model copy); the summary names that reading.

    References:
    torchrun docs on LOCAL_RANK and torch.cuda.set_device; NVIDIA/apex#200.
    """
    if signals(evidence, "smi.process_row"):
        return
    used = _used_by_gpu(evidence)
    if len(used) < 3:
        return
    first = min(used)
    heavy, (_, heavy_item) = used[first][0], used[first]
    others = [mib for gpu, (mib, _) in used.items() if gpu != first]
    typical = statistics.median(others)
    if heavy < _FACTOR * typical or heavy - typical < _EXTRA_MIB:
        return
    if max(others) > (1 + _SPREAD) * min(others):
        return
    oom = bool(signals(evidence, "generic.out_of_memory"))
    yield Finding(
        title=f"GPU {first} holds {heavy:,} MiB, the other GPUs about {typical:,.0f} MiB each",
        summary=f"nvidia-smi shows GPU {first} holding {heavy:,} MiB while the {len(others)}"
        f" other GPUs hold {typical:,.0f} MiB each, alike: the ranks' default device collects"
        " their contexts and tensors when they do not each set their own device first. The"
        " other reading: rank 0 does more than the others on purpose (evaluation, gathered"
        " outputs); nvidia-smi's process rows say which.",
        ranks=[],
        confidence=0.55 if oom else 0.4,
        evidence=ids([heavy_item]),
        fix=FIX,
        confirm=CONFIRM,
    )


def _used_by_gpu(evidence: EvidenceSet) -> dict[int, tuple[int, Signal]]:
    """Each GPU's memory in use: a memory line belongs to the GPU row above it."""
    rows = sorted(
        signals(evidence, "smi.gpu_row", "smi.gpu_memory"),
        key=lambda item: (item[1].path, item[1].line),
    )
    used: dict[int, tuple[int, Signal]] = {}
    gpu: int | None = None
    for item in rows:
        if item[1].signature == "smi.gpu_row":
            gpu = int(item[1].fields["gpu"])
        elif gpu is not None and gpu not in used:
            used[gpu] = (int(item[1].fields["used"]), item)
    return used
