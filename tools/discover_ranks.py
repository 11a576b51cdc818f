"""Process discovery: which live processes are the job's ranks, and which ranks are gone.

A rank's place in the job is in its environment (RANK, WORLD_SIZE, ... as torchrun,
SLURM wrappers and most launchers set it). Peers of the given pids found on this
host join the analysis, so `--pids` with one rank still sees the whole local job.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

import psutil
from triage.tools.dump_stacks import PTRACE_HINT

from triage.models import Evidence, Gap
from triage.observations import MissingRank, RankProcess
from triage.registry import ToolError, ToolOutput, tool
from triage.text import format_ranks

LAUNCHERS = (
    ("torchrun", ("torchrun", "torch.distributed.run", "torch.distributed.launch")),
    ("deepspeed", ("deepspeed",)),
    ("accelerate", ("accelerate",)),
    ("srun", ("srun", "slurmstepd")),
    ("mpirun", ("mpirun", "mpiexec", "orted", "prted")),
)
_LOOPBACK = ("127.", "localhost", "::1")


def _int(env: dict[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return None


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.Error, OSError):
        return []


def _launcher(proc: psutil.Process) -> tuple[str | None, int | None]:
    """Walk up the parents to the first process that looks like a launcher."""
    own = " ".join(_cmdline(proc))
    try:
        parents = proc.parents()
    except psutil.Error:
        parents = []
    if "multiprocessing" in own and ("spawn_main" in own or "--multiprocessing-fork" in own):
        return "mp.spawn", parents[0].pid if parents else None
    for parent in parents:
        words = " ".join(_cmdline(parent))
        for name, needles in LAUNCHERS:
            if any(needle in words for needle in needles):
                return name, parent.pid
    return None, None


def _job_id(env: dict[str, str]) -> str | None:
    if env.get("TORCHELASTIC_RUN_ID"):
        return f"torchelastic:{env['TORCHELASTIC_RUN_ID']}"
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    return None


def read_process(pid: int, host: str) -> RankProcess:
    """One process's place in the job; raises psutil errors for the caller to explain."""
    proc = psutil.Process(pid)
    status = proc.status()
    env = proc.environ() if status != psutil.STATUS_ZOMBIE else {}
    launcher, launcher_pid = _launcher(proc)
    rank = _int(env, "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
    return RankProcess(
        pid=pid,
        rank=rank,
        local_rank=_int(env, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"),
        world_size=_int(env, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"),
        local_world_size=_int(env, "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        group_rank=_int(env, "GROUP_RANK", "SLURM_NODEID"),
        host=host,
        launcher=launcher,
        launcher_pid=launcher_pid,
        job_id=_job_id(env),
        master=f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
        if env.get("MASTER_ADDR")
        else None,
        status=status,
        cmdline=" ".join(_cmdline(proc))[:300],
        rank_source="env" if rank is not None else "unknown",
    )


_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "semaphore_tracker")


def _is_helper(cmdline: list[str]) -> bool:
    """multiprocessing's own helper processes sit beside the ranks; they are not ranks."""
    words = " ".join(cmdline)
    return any(helper in words for helper in _HELPERS)


def launcher_children(launcher_pid: int) -> list[int]:
    """Rank processes under a launcher: its Python descendants, minus their own workers."""
    try:
        children = psutil.Process(launcher_pid).children(recursive=True)
    except psutil.NoSuchProcess as exc:
        raise ToolError(f"launcher pid {launcher_pid} does not exist") from exc
    except psutil.AccessDenied as exc:
        raise ToolError(f"launcher pid {launcher_pid}: permission denied", PTRACE_HINT) from exc
    pythons = {
        c.pid: c
        for c in children
        if "python" in " ".join(_cmdline(c)[:1]).lower() and not _is_helper(_cmdline(c))
    }
    ranks = []
    for pid, child in pythons.items():
        try:
            parent = child.ppid()
        except psutil.Error:
            continue
        if parent not in pythons:  # a DataLoader worker's parent is a rank, not the launcher
            ranks.append(pid)
    return sorted(ranks)


def _same_job_on_host(job_ids: set[str], known: set[int], host: str) -> list[RankProcess]:
    """Other ranks of the same job on this host that the user did not name."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):  # torch renames ranks' threads: no name filter
        if proc.pid in known or proc.pid == me:
            continue
        try:
            info = read_process(proc.pid, host)
        except (psutil.Error, OSError):
            continue
        if info.job_id in job_ids and info.rank is not None:
            found.append(info)
    return [p for p in found if not _is_worker(p, found)]


def _covers_world(processes: list[RankProcess]) -> bool:
    """Every rank of the world is already in hand: no need to scan the host."""
    sizes = {p.world_size for p in processes if p.world_size}
    return len(sizes) == 1 and {p.rank for p in processes} >= set(range(sizes.pop()))


def _is_worker(candidate: RankProcess, peers: Iterable[RankProcess]) -> bool:
    """A DataLoader worker inherits its rank's environment; it is not a rank itself."""
    try:
        parent = psutil.Process(candidate.pid).ppid()
    except psutil.Error:
        return False
    return any(p.pid == parent and p.rank == candidate.rank for p in peers)


def _missing_ranks(processes: list[RankProcess], host: str) -> tuple[list[MissingRank], list[Gap]]:
    sizes = {p.world_size for p in processes if p.world_size}
    if not sizes:
        return [], []
    world = max(sizes)
    present = {p.rank for p in processes if p.rank is not None and p.status != psutil.STATUS_ZOMBIE}
    absent = sorted(set(range(world)) - present)
    if not absent:
        return [], []
    local_sizes = {p.local_world_size for p in processes if p.local_world_size}
    masters = {(p.master or "").split(":")[0] for p in processes}
    single_host = (local_sizes and max(local_sizes) >= world) or all(
        m.startswith(_LOOPBACK) for m in masters if m
    )
    if single_host:
        reason = f"WORLD_SIZE is {world} and no live process on {host} holds this rank"
        return [
            MissingRank(rank=r, world_size=world, scope="host", reason=reason) for r in absent
        ], []
    local_ranks = {p.local_rank for p in processes if p.local_rank is not None}
    missing_local = []
    if local_sizes and local_ranks:
        expected_local = set(range(max(local_sizes)))
        missing_local = sorted(expected_local - local_ranks)
    missing = [
        MissingRank(
            local_rank=lr,
            world_size=world,
            scope="host",
            reason=f"local rank {lr} of {host} has no live process",
        )
        for lr in missing_local
    ]
    gap = Gap(
        source=host,
        reason=f"ranks {format_ranks(absent)} are not on this host and were not inspected",
        hint="run `triage hang` on the other hosts too, or use Flight Recorder dumps from every rank",
    )
    return missing, [gap]


@tool(name="discover_ranks")
def discover_ranks(pids: list[int] | None = None, launcher_pid: int | None = None) -> ToolOutput:
    """Find a job's rank processes (from pids or a launcher's pid) and read rank, world size,
    host and launcher from their environment; report ranks that have no live process."""
    host = socket.gethostname()
    wanted = list(dict.fromkeys(pids or []))
    if launcher_pid is not None:
        wanted += [pid for pid in launcher_children(launcher_pid) if pid not in wanted]
    if not wanted:
        raise ToolError("no processes to inspect", "pass --pids PID... or --launcher-pid PID")
    processes: list[RankProcess] = []
    gaps: list[Gap] = []
    for pid in wanted:
        try:
            processes.append(read_process(pid, host))
        except psutil.NoSuchProcess:
            gaps.append(Gap(source=f"pid:{pid}", reason=f"pid {pid} does not exist (exited?)"))
        except psutil.AccessDenied:
            gaps.append(
                Gap(
                    source=f"pid:{pid}",
                    reason="permission denied reading its environment",
                    hint=PTRACE_HINT,
                )
            )
    job_ids = {p.job_id for p in processes if p.job_id}
    extra = []
    if job_ids and not _covers_world(processes):
        extra = _same_job_on_host(job_ids, {p.pid for p in processes}, host)
    processes += extra
    processes.sort(key=lambda p: (p.rank is None, p.rank if p.rank is not None else p.pid))
    missing, scope_gaps = _missing_ranks(processes, host)
    gaps += scope_gaps

    evidence = [_process_evidence(p) for p in processes]
    evidence += [
        Evidence(
            id=f"missing:rank{m.rank}" if m.rank is not None else f"missing:local{m.local_rank}",
            kind=MissingRank.EVIDENCE_KIND,
            source=host,
            rank=m.rank,
            summary=f"{_who(m)}: no live process ({m.reason})",
            data=m.model_dump(),
        )
        for m in missing
    ]
    context = {
        "pids": [p.pid for p in processes if p.status != psutil.STATUS_ZOMBIE],
        "ranks_by_pid": {p.pid: p.rank for p in processes if p.rank is not None},
    }
    notes = [f"found {len(extra)} more ranks of the same job on {host}"] if extra else []
    text = "\n".join(notes + [e.summary for e in evidence])
    return ToolOutput(evidence=evidence, gaps=gaps, context=context, text=text)


def _process_evidence(p: RankProcess) -> Evidence:
    who = f"rank {p.rank}" if p.rank is not None else f"pid {p.pid} (rank unknown)"
    launched = f", launched by {p.launcher}" if p.launcher else ""
    world = f"/{p.world_size}" if p.world_size else ""
    return Evidence(
        id=f"process:{p.pid}",
        kind=RankProcess.EVIDENCE_KIND,
        source=f"pid:{p.pid}",
        rank=p.rank,
        summary=f"{who}{world} is pid {p.pid} on {p.host} ({p.status}{launched})",
        data=p.model_dump(),
    )


def _who(m: MissingRank) -> str:
    return f"rank {m.rank}" if m.rank is not None else f"local rank {m.local_rank}"
