"""comm.shm_exhausted from the environment: /dev/shm too small for the local ranks."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.environment import environment_view, ranks_of
from triage.registry import EvidenceSet, rule

SMALL_SHM = 1 << 30
NEARLY_FULL = 64 << 20


@rule("env.shm_exhausted", "comm.shm_exhausted")
def shm_exhausted(evidence: EvidenceSet) -> Iterator[Finding]:
    """/dev/shm on this host is too small (or nearly full) for several local ranks.

    What it detects:
    /dev/shm under 1 GiB, or with under 64 MiB (and 10%) free, on a host running two or more ranks
    (LOCAL_WORLD_SIZE or the ranks found); a small /dev/shm with no ranks known scores low.

    Why it happens:
    Containers get a 64 MB /dev/shm by default (docker) or none at all (Kubernetes without
    a Memory emptyDir). NCCL's intra-node SHM transport and DataLoader workers allocate
    there; a few GPUs exhaust 64 MB and NCCL fails with `posix_fallocate failed` or ranks
    die of SIGBUS. Files leaked by killed jobs fill it too.

    Evidence:
    /dev/shm's size and free space as the ranks see it (through /proc/PID/root, so a
    container's own /dev/shm), else the host's; the number of local ranks.

    Fix:
    Give the container a larger /dev/shm (`docker run --shm-size=16g` or `--ipc=host`; a
    `medium: Memory` emptyDir at /dev/shm on Kubernetes); delete stale /dev/shm/nccl-* and
    torch_* files; NCCL_SHM_DISABLE=1 as a workaround for NCCL.

    Known false positives:
    Jobs with one rank per host and no DataLoader workers need little shared memory.

    References:
    NCCL troubleshooting, "Docker" (--shm-size); PyTorch DataLoader docs on shared memory.
    """
    view = environment_view(evidence)
    if view.host is None:
        return
    host_evidence, host = view.host
    seen = [f for _, f in view.ranks if f.shm_total_bytes is not None] or [host]
    smallest = min(seen, key=lambda f: f.shm_total_bytes or 0)
    total, free = smallest.shm_total_bytes, smallest.shm_free_bytes
    if total is None:
        return
    small = total < SMALL_SHM
    full = free is not None and free < min(NEARLY_FULL, total // 10)
    if not (small or full):
        return
    local = view.local_world() if view.ranks else 0
    if view.ranks and local < 2:
        return
    confidence = 0.6 if local >= 2 else 0.35
    if full and local >= 2:
        confidence = 0.65
    state = f"{total / 2**20:.0f} MiB" + (
        f", {free / 2**20:.0f} MiB free" if free is not None else ""
    )
    ranks = f" for {local} local ranks" if local else ""
    yield Finding(
        title=f"/dev/shm on {host.host} is {'nearly full' if full else 'small'} ({state}){ranks}",
        summary=f"/dev/shm on {host.host} has {state}{ranks}; NCCL's shared-memory transport and "
        "DataLoader workers need far more (containers default to 64 MB).",
        ranks=ranks_of(f for _, f in view.ranks),
        confidence=confidence,
        evidence=[host_evidence.id] + [e.id for e, _ in view.ranks],
        fix="Enlarge /dev/shm (docker --shm-size=16g or --ipc=host; a Memory emptyDir at /dev/shm on "
        "Kubernetes) and clear stale /dev/shm/nccl-* and torch_* files; NCCL_SHM_DISABLE=1 works "
        "around it for NCCL.",
        confirm="the ranks' logs show `posix_fallocate failed`, `No space left on device` under "
        "/dev/shm, or a SIGBUS",
    )
