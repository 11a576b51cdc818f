"""oom.same_device from nvidia-smi's table: several processes of one job on one GPU."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, ids, signals
from triage.rules.memory.same_device import CONFIRM, FIX


@rule("logs.smi_shared_gpu", "oom.same_device")
def smi_shared_gpu(evidence: EvidenceSet) -> Iterator[Finding]:
    """nvidia-smi shows several processes of one program on one GPU while another GPU of the
    host holds none of them, or while they each hold their own GPU too.

    What it detects:
    nvidia-smi's table pasted into a report: its GPU rows (index and bus id) and its
    process rows (GPU, pid, name, memory). Two or more processes of the same program
    holding memory (100 MiB or more) on one GPU, and either a GPU of the table without any
    of them, some of them holding memory on their own GPU too, or all but one of them
    holding the same small amount (a context each, under 2 GiB) beside one that holds
    more than twice as much (the GPU's own rank).

    Why it happens:
    The ranks never chose their own device: no torch.cuda.set_device(local_rank), a
    hard-coded 'cuda' or 'cuda:0', a checkpoint restored without map_location, or
    CUDA_VISIBLE_DEVICES naming one GPU for every rank. Each rank's context, NCCL buffers
    and tensors then share that GPU, which runs out of memory while the others idle.

    Evidence:
    The process rows on the crowded GPU and the GPU rows of the idle ones.

    Fix:
    One GPU per rank: set_device(LOCAL_RANK) before any CUDA work, tensors and models on
    that device, map_location for checkpoints.

    Known false positives:
    A program that runs several processes on one GPU on purpose (MPS, an inference server's
    workers), or processes of two different jobs that share a name.

    References:
    torchrun docs on LOCAL_RANK and torch.cuda.set_device.
    """
    rows = [item for item in signals(evidence, "smi.process_row") if holds_memory(item)]
    if len(rows) < 2:
        return
    program, _ = Counter(str(s.fields["name"]) for _, s in rows).most_common(1)[0]
    by_gpu: dict[int, list[Signal]] = defaultdict(list)
    by_pid: dict[int, set[int]] = defaultdict(set)
    for item in rows:
        if item[1].fields["name"] == program:
            by_gpu[int(item[1].fields["gpu"])].append(item)
            by_pid[int(item[1].fields["pid"])].add(int(item[1].fields["gpu"]))
    crowded = max(by_gpu, key=lambda gpu: (len(by_gpu[gpu]), -gpu))
    if len(by_gpu[crowded]) < 2:
        return
    gpus = {int(s.fields["gpu"]) for _, s in signals(evidence, "smi.gpu_row")}
    idle = sorted(gpus - set(by_gpu))
    visiting = sorted(pid for pid, on in by_pid.items() if crowded in on and len(on) > 1)
    guests = _guests(by_gpu[crowded])
    if not idle and not visiting and not guests:
        return
    held = sum(int(s.fields["mib"]) for _, s in by_gpu[crowded])
    count = len(by_gpu[crowded])
    if visiting:
        why = (
            f"process{'es' if len(visiting) > 1 else ''} {', '.join(map(str, visiting))} also"
            f" hold{'s' if len(visiting) == 1 else ''} memory on GPU {crowded} besides"
            " their own GPU: each rank made a context or tensors on it"
        )
    elif guests:
        host, mib = guests
        beside, alike = (f"beside process {host}, ", count - 1) if host else ("", count)
        why = (
            f"{beside}{alike} of them hold the same {mib:,} MiB each, the footprint of a CUDA"
            " context (and what was restored onto it): the other ranks made a context on GPU"
            f" {crowded} besides their own"
        )
    else:
        why = (
            f"GPU{'s' if len(idle) > 1 else ''} {', '.join(map(str, idle))} hold"
            f"{'s' if len(idle) == 1 else ''} none of them: the ranks did not each take their own"
            " GPU"
        )
    oom = bool(signals(evidence, "generic.out_of_memory"))
    yield Finding(
        title=f"{count} {program} processes hold memory on GPU {crowded}",
        summary=f"nvidia-smi lists {count} {program} processes on GPU {crowded} ({held:,} MiB"
        f" between them); {why}" + (", and the job ran out of memory." if oom else "."),
        ranks=[],
        confidence=0.7 if oom else 0.45,
        evidence=ids(by_gpu[crowded][:6]),
        fix=FIX,
        confirm=CONFIRM,
    )


#: Memory a process's row must show to count: every CUDA process of a host may appear on
#: every GPU with a few MiB of context (NCCL, a barrier before set_device) or none at all.
_HELD_MIB = 100


#: The most a visiting rank's context (and what it restored there) holds: a rank's own
#: GPU holds its model, optimizer and activations, far more.
_CONTEXT_MIB = 2048


def _guests(rows: list[Signal]) -> tuple[int | None, int] | None:
    """(the host's pid, the guests' MiB) when every process on a GPU but the largest holds
    the same small amount (within 10%), the largest more than twice that: one rank's GPU
    that the other ranks each made a context on. Three or more alike and no larger one: the
    guests alone (the host's row cut from the paste), host None."""
    if len(rows) < 3:
        return None
    sizes = sorted((int(s.fields["mib"]) for _, s in rows), reverse=True)
    if _alike(sizes):
        return None, sizes[0]
    ordered = sorted(rows, key=lambda item: int(item[1].fields["mib"]), reverse=True)
    if not _alike(sizes[1:]) or sizes[0] <= 2 * sizes[1]:
        return None
    return int(ordered[0][1].fields["pid"]), sizes[1]


def _alike(sizes: list[int]) -> bool:
    """Context-sized footprints (under 2 GiB), the same within 10%."""
    return max(sizes) <= _CONTEXT_MIB and max(sizes) <= 1.1 * min(sizes)


def holds_memory(item: Signal) -> bool:
    """Whether an nvidia-smi process row shows the process holding memory, not a bare context."""
    return int(item[1].fields["mib"]) >= _HELD_MIB
