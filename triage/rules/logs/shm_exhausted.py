"""comm.shm_exhausted from logs: /dev/shm is too small or missing for NCCL or DataLoader."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import CommView, comm_view, quote
from triage.rules.logs._signals import Found, ids, ranks_of, strongest
from triage.text import rank_label

_NO_SPACE = re.compile(r"No space left|shm\)|Bus error|bus error|out of shared memory")
_FD_LIMIT = re.compile(r"Too many open files")
#: A process's own crash report of a bus error: the shell's, a signal handler's (UCX's
#: `Caught signal 7 (Bus error: ...)`, Open MPI's `Signal: Bus error (7)`), glog's.
_BUS_ERROR = re.compile(r"Bus error|SIGBUS")
#: NCCL's shared-memory sources (`include/shm.h`, `misc/shmutils.cc`, `transport/shm.cc`):
#: a system error traced back to them is a segment in /dev/shm that could not be made.
_SHM_FILE = re.compile(r"(?:^|/)shm(?:utils)?\.(?:h|cc)$")
#: /dev/shm below this is too small for NCCL's shared-memory transport between a few GPUs
#: (Docker's default is 64 MB).
_SMALL = 1 << 30
_SHM_TEXT = re.compile(r"shared memory|/dev/shm|shm|init_process_group|all_reduce|barrier")
_FIX = (
    "Enlarge /dev/shm (docker --shm-size=16g or --ipc=host; a Memory emptyDir at /dev/shm on "
    "Kubernetes) and clear stale /dev/shm/nccl-* files; NCCL_SHM_DISABLE=1 works around it for "
    "NCCL, fewer DataLoader workers for data loading."
)
_FIX_FD = (
    "Raise the open-file limit (`ulimit -n`) or use "
    '`torch.multiprocessing.set_sharing_strategy("file_system")`.'
)


@rule("logs.shm_exhausted", "comm.shm_exhausted")
def shm_exhausted(evidence: EvidenceSet) -> Iterator[Finding]:
    """Shared memory (/dev/shm) ran out or is unavailable to NCCL or DataLoader workers.

    What it detects:
    NCCL's `Call to posix_fallocate failed` / `failed to extend /dev/shm/nccl-* to N bytes` /
    `Error while creating shared memory segment ... No space left on device`; torch's
    `unable to write to file </torch_...>: No space left on device`; DataLoader's
    `Unexpected bus error ... insufficient shared memory (shm)` and workers killed by a bus
    error; a rank killed by SIGBUS, or reporting its own bus error (a shell's `Bus error`, a
    signal handler's `Caught signal 7 (Bus error: ...)`); Ray's raylet refusing an object
    store request larger than /dev/shm (0.75); weaker (0.5), with no failure named, Ray's
    start-up warning that /dev/shm holds under 1 GB (`/dev/shm has only 67108864 bytes
    available`) or df's line for it (`shm 64M 0 64M 0% /dev/shm`): a container left at
    Docker's default (0.6 beside NCCL's bare `unhandled system error`). Without any of these, NCCL's bare `unhandled system
    error` on one host (nothing names the failing call) ranks /dev/shm low (0.35), as the
    usual one of the candidates.

    Why it happens:
    NCCL's SHM transport between local GPUs and DataLoader workers passing batches both
    allocate in /dev/shm. Docker gives containers 64 MB by default and Kubernetes pods get
    no /dev/shm volume unless one is mounted; segments leaked by a killed job also fill it.
    NCCL segments are several MB per channel and peer, so 64 MB runs out at a few GPUs.

    Evidence:
    The failing call and its size; the ranks that report it.

    Fix:
    Give the container a larger /dev/shm: `docker run --shm-size=16g` (or `--ipc=host`), or
    a `medium: Memory` emptyDir mounted at /dev/shm in Kubernetes; remove stale
    /dev/shm/nccl-* and /dev/shm/torch_* files. Workarounds: NCCL_SHM_DISABLE=1 (NCCL uses
    P2P or the network instead), fewer DataLoader workers, or
    `torch.multiprocessing.set_sharing_strategy("file_system")`.

    Known false positives:
    A SIGBUS alone can come from other mmap failures; that case scores low.
    `Error while attaching to shared memory segment` without an out-of-space reason can mean
    the ranks run in containers that do not share /dev/shm (it is still a /dev/shm problem).

    References:
    NCCL troubleshooting guide, "Docker" and "Shared memory" sections; PyTorch DataLoader
    docs on shared memory and `--shm-size`.
    """
    view = comm_view(evidence)
    nccl = view.of("nccl.shm_failed", "shm.no_space")
    files = view.of("shm.torch_file")
    workers = view.of("shm.dataloader_bus_error")
    sigbus = [
        (e, s)
        for e, s in view.of(
            "elastic.child_failed",
            "elastic.process_signal",
            "elastic.worker_failed",
            "spawn.process_signal",
            "launcher.child_exit",
        )
        if s.fields.get("signal") == "SIGBUS"
    ] + [(e, s) for e, s in view.of("process.crashed") if _BUS_ERROR.search(s.text)]
    found: list[Found] = []
    if nccl:
        attach_only = all(
            s.fields.get("op") == "attaching to" and not _NO_SPACE.search(s.text) for _, s in nccl
        )
        found.append(
            (
                0.7 if attach_only else 0.9,
                "NCCL could not create its shared-memory segment",
                nccl,
                _FIX,
            )
        )
    if workers:
        found.append((0.85, "DataLoader workers died of a bus error in /dev/shm", workers, _FIX))
    if files:
        no_space = [(e, s) for e, s in files if _NO_SPACE.search(s.text)]
        fd_limit = [(e, s) for e, s in files if _FD_LIMIT.search(s.text)]
        if no_space:
            found.append(
                (0.85, "torch could not write a shared-memory tensor file", no_space, _FIX)
            )
        elif fd_limit:
            found.append(
                (
                    0.5,
                    "torch ran out of file descriptors for shared-memory tensors",
                    fd_limit,
                    _FIX_FD,
                )
            )
        else:
            found.append((0.6, "torch could not map a shared-memory tensor file", files, _FIX))
    traced = [
        (e, s)
        for e, s in view.of("nccl.error_trace")
        if s.fields["code"] == 2 and _SHM_FILE.search(str(s.fields["file"]))
    ]
    if traced and not nccl:
        what = "NCCL's trace of its failed system call ends in its shared-memory code"
        found.append((0.6, what, traced, _FIX))
    if ray := view.of("shm.ray_request"):
        found.append((0.75, "Ray's object store asked /dev/shm for more than it holds", ray, _FIX))
    small = [
        (e, s)
        for e, s in view.of("shm.ray_small", "shm.df_size")
        if s.fields.get("bytes", _SMALL) < _SMALL
    ]
    if small and not found:
        size = small[0][1].fields["bytes"] >> 20
        who = "Ray measured it" if small[0][1].signature == "shm.ray_small" else "df shows it"
        what = f"/dev/shm holds only {size} MB here ({who})"
        # NCCL's bare system error beside it: its shared-memory segments are the likely call
        if errors := view.unnamed("system"):
            found.append(
                (0.6, f"NCCL failed with a system error, and {what}", errors + small, _FIX)
            )
        else:
            found.append((0.5, what, small, _FIX))
    if sigbus and not found:
        found.append(
            (0.5, "a rank was killed by SIGBUS (an mmap of /dev/shm past its size)", sigbus, _FIX)
        )
    if not found:
        yield from _suspected(view)
        return
    (confidence, what, items, fix), every = strongest(found)
    ranks = ranks_of(s for _, s in every)
    who = rank_label(ranks) if ranks else "the job"
    yield Finding(
        title=f"{what} ({who})",
        summary=f"{what}: `{quote(items)}`. /dev/shm is full or too small on {who}'s host.",
        ranks=ranks,
        location=view.location(ranks, _SHM_TEXT),
        confidence=confidence,
        evidence=ids(every)[:8],
        fix=fix,
        confirm=f"`df -h /dev/shm` on {who}'s host shows it full or only 64 MB",
    )


def _suspected(view: CommView) -> Iterator[Finding]:
    """NCCL's `unhandled system error` on one host, no line naming the call that failed:
    between GPUs of one host NCCL's system calls are mostly its shared-memory segments."""
    errors = view.unnamed("system") if view.multi_host is False else []
    if not errors:
        return
    ranks = ranks_of(s for _, s in errors)
    yield Finding(
        title="NCCL failed with a system error on one host: /dev/shm is the usual suspect",
        summary=(
            f"`{quote(errors)}` on one host, and no line names the call that failed. Between "
            "GPUs of one host NCCL's system calls are mostly its shared-memory segments, which "
            "fail when /dev/shm is small (docker's 64 MB default) or not shared between "
            "containers; a socket or CUDA IPC call is the other candidate. NCCL_DEBUG=INFO "
            "names the call."
        ),
        ranks=ranks,
        location=view.location(ranks, _SHM_TEXT),
        confidence=0.35,
        evidence=ids(errors)[:8],
        fix=_FIX,
        confirm="`df -h /dev/shm` shows it full or 64 MB, or NCCL_SHM_DISABLE=1 makes the error"
        " go away; with NCCL_DEBUG=INFO the WARN before the error names the failing call",
    )
