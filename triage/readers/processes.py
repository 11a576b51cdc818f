"""Process discovery: which live processes are a job's ranks, and what their environment
says about their place in it.

A rank's place in the job is in its environment (RANK, WORLD_SIZE, ... as torchrun,
SLURM wrappers and most launchers set it). Ranks are found from the pids a user names,
from a launcher's pid, or as peers of those pids on this host (same torchelastic run or
master), so one rank's pid still sees the whole local job; ranks of the world with no
live process here are missing, on this host or on others.

Two ways to find the ranks under a launcher live here: `launcher_children` (the
`discover_ranks` tool: the launcher's Python descendants whose parent is not one of
them) and `rank_pids` (`triage run`: descendants with a RANK, else the Python children,
else the launcher itself, launchers in between left out). `job_processes` finds every
rank on this host whose environment names one job (`triage collect`: a Slurm step, a
torchelastic run, a master address).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable

import psutil

from triage.job.probe_protocol import DEBUG_SERVER_PORT_ENV
from triage.observations import MissingRank, RankProcess

LAUNCHERS = (
    ("torchrun", ("torchrun", "torch.distributed.run", "torch.distributed.launch")),
    ("deepspeed", ("deepspeed",)),
    ("accelerate", ("accelerate",)),
    ("srun", ("srun", "slurmstepd")),
    ("mpirun", ("mpirun", "mpiexec", "orted", "prted")),
)
_LOOPBACK = ("127.", "localhost", "::1")
#: Launchers run as `python -m MODULE` or as their own script (`is_launcher`).
_LAUNCHER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "deepspeed.launcher.runner",
    "deepspeed.launcher.launch",
    "accelerate.commands.launch",
}
_LAUNCHER_SCRIPTS = {"torchrun", "deepspeed", "accelerate"}
#: multiprocessing's own helper processes sit beside the ranks; they are not ranks.
_RUN_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
_HELPERS = (*_RUN_HELPERS, "semaphore_tracker")


def environ(proc: psutil.Process) -> dict[str, str]:
    """A process's environment; empty when it is gone or not ours to read."""
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def environ_of(pid: int) -> dict[str, str]:
    """The environment of `pid`; empty when it is gone or not ours to read."""
    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return {}


def cmdline(proc: psutil.Process) -> list[str]:
    """A process's argv; empty when it is gone or not ours to read."""
    try:
        return proc.cmdline()
    except (psutil.Error, OSError):
        return []


def is_launcher(argv: list[str]) -> bool:
    """`python -m torch.distributed.run ...`, `.../bin/torchrun ...`: a launcher, not a rank
    (whose own arguments may well mention one, like `--deepspeed ds.json`)."""
    if "-m" in argv[:3]:
        module = argv[argv.index("-m") + 1 : argv.index("-m") + 2]
        return bool(module) and module[0] in _LAUNCHER_MODULES
    return len(argv) > 1 and os.path.basename(argv[1]) in _LAUNCHER_SCRIPTS


def rank_pids(launcher_pid: int) -> list[int]:
    """The job's rank processes: Python descendants with a RANK (torchrun, deepspeed,
    srun wrappers), else the launcher's Python children (mp.spawn), else the launcher
    itself; workers of a rank (DataLoader) and launchers in between are left out.
    Empty when the launcher is gone or cannot be read."""
    try:
        root = psutil.Process(launcher_pid)
        family = root.children(recursive=True)
    except psutil.Error:
        return []
    candidates: dict[int, psutil.Process] = {}
    for proc in family:
        argv = cmdline(proc)
        words = " ".join(argv)
        if not argv or "python" not in os.path.basename(argv[0]).lower():
            continue
        if is_launcher(argv) or any(helper in words for helper in _RUN_HELPERS):
            continue
        candidates[proc.pid] = proc
    with_rank = {pid: p for pid, p in candidates.items() if "RANK" in environ(p)}
    pool = with_rank or candidates
    ranks = []
    for pid, proc in pool.items():
        try:
            ancestors = {parent.pid for parent in proc.parents()}
        except psutil.Error:
            continue
        if not ancestors & set(pool):
            ranks.append(pid)
    argv = cmdline(root)
    if not ranks and argv and "python" in os.path.basename(argv[0]).lower():
        ranks = [] if is_launcher(argv) else [launcher_pid]
    return sorted(ranks)


#: Where launchers put a process's global rank, most specific first.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def job_processes(member: Callable[[dict[str, str]], bool]) -> list[int]:
    """The ranks on this host whose environment `member` accepts: Python processes with a
    rank variable, launchers, multiprocessing's helpers and a rank's own workers (which
    inherit its environment) left out. Never this process or its parents: a collector run
    inside the job's pod or step inherits the job's variables."""
    me = psutil.Process()
    skip = {me.pid, *(parent.pid for parent in me.parents())}
    found: dict[int, tuple[psutil.Process, str]] = {}
    for proc in psutil.process_iter(["pid"]):  # torch renames ranks' threads: no name filter
        env = environ(proc) if proc.pid not in skip else {}
        rank = next((env[name] for name in RANK_VARIABLES if name in env), None)
        if rank is None or not member(env):
            continue
        argv = cmdline(proc)
        python = bool(argv) and "python" in os.path.basename(argv[0]).lower()
        if python and not is_launcher(argv) and not _is_helper(argv):
            found[proc.pid] = (proc, rank)
    ranks = []
    for pid, (proc, rank) in found.items():
        try:
            parent = proc.ppid()
        except psutil.Error:
            continue
        if parent not in found or found[parent][1] != rank:
            ranks.append(pid)
    return sorted(ranks)


def _int(env: dict[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return None


#: Launchers already found above a parent process, by the parent's pid (see `_launcher`).
Launchers = dict[int, tuple[str | None, int | None]]


def _launcher(
    proc: psutil.Process, above: Launchers | None = None
) -> tuple[str | None, int | None]:
    """Walk up the parents to the first process that looks like a launcher. `above` keeps
    what was found over each parent: a job's ranks share theirs, and walking the same
    chain of parents again for each of 64 ranks cost more than reading the ranks."""
    own = " ".join(cmdline(proc))
    try:
        parent = proc.parent()
    except psutil.Error:
        parent = None
    if "multiprocessing" in own and ("spawn_main" in own or "--multiprocessing-fork" in own):
        return "mp.spawn", parent.pid if parent else None
    if parent is None:
        return None, None
    if above is not None and parent.pid in above:
        return above[parent.pid]
    try:
        chain = [parent, *parent.parents()]
    except psutil.Error:
        chain = []
    found: tuple[str | None, int | None] = (None, None)
    for process in chain:
        words = " ".join(cmdline(process))
        name = next((n for n, needles in LAUNCHERS if any(x in words for x in needles)), None)
        if name is not None:
            found = (name, process.pid)
            break
    if above is not None:
        above[parent.pid] = found
    return found


def launcher_of(pid: int) -> int | None:
    """The pid of the launcher `pid` runs under (torchrun, mp.spawn's parent, ...), if any."""
    try:
        return _launcher(psutil.Process(pid))[1]
    except psutil.Error:
        return None


def _slurm_step(env: dict[str, str]) -> str | None:
    """JOB.STEP as `--slurm-job` takes it; the batch script's own steps are not numbered."""
    job, step = env.get("SLURM_JOB_ID", "").strip(), env.get("SLURM_STEP_ID", "").strip()
    if not job.isdigit():
        return None
    return f"{job}.{step}" if step.isdigit() else job


#: A job id that names a torchelastic run (`triage collect --run-id`), not a master address.
RUN_ID_PREFIX = "torchelastic:"


def _job_id(env: dict[str, str]) -> str | None:
    if env.get("TORCHELASTIC_RUN_ID"):
        return f"{RUN_ID_PREFIX}{env['TORCHELASTIC_RUN_ID']}"
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    return None


def read_process(pid: int, host: str, launchers: Launchers | None = None) -> RankProcess:
    """One process's place in the job; raises psutil errors for the caller to explain.
    `launchers` carries the launchers found from one call to the next (`_launcher`)."""
    proc = psutil.Process(pid)
    status = proc.status()
    env = proc.environ() if status != psutil.STATUS_ZOMBIE else {}
    launcher, launcher_pid = _launcher(proc, launchers)
    rank = _int(env, *RANK_VARIABLES)
    return RankProcess(
        pid=pid,
        rank=rank,
        local_rank=_int(env, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"),
        world_size=_int(env, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"),
        local_world_size=_int(env, "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        group_rank=_int(env, "GROUP_RANK", "NODE_RANK", "SLURM_NODEID"),
        nodes=_int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
        host=host,
        launcher=launcher,
        launcher_pid=launcher_pid,
        job_id=_job_id(env),
        slurm_job=_slurm_step(env),
        debug_server_port=_int(env, DEBUG_SERVER_PORT_ENV),
        master=f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
        if env.get("MASTER_ADDR")
        else None,
        status=status,
        cmdline=" ".join(cmdline(proc))[:300],
        rank_source="env" if rank is not None else "unknown",
    )


def _is_helper(argv: list[str]) -> bool:
    """multiprocessing's own helper processes sit beside the ranks; they are not ranks."""
    words = " ".join(argv)
    return any(helper in words for helper in _HELPERS)


def launcher_children(launcher_pid: int) -> list[int]:
    """Rank processes under a launcher: its Python descendants, minus their own workers.
    Raises psutil.NoSuchProcess or psutil.AccessDenied when the launcher cannot be read."""
    children = psutil.Process(launcher_pid).children(recursive=True)
    pythons = {
        c.pid: c
        for c in children
        if "python" in " ".join(cmdline(c)[:1]).lower() and not _is_helper(cmdline(c))
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


def same_job_on_host(
    job_ids: set[str], known: set[int], host: str, nodes: set[int] | None = None
) -> list[RankProcess]:
    """Other ranks of the same job on this host that the user did not name; with `nodes`
    (the GROUP_RANKs of the ranks named), only those of the same nodes: where several
    nodes share a host (Slurm's multiple slurmd, a test), another node's ranks are its own."""
    found = []
    me = os.getpid()
    launchers: Launchers = {}
    for proc in psutil.process_iter(["pid"]):  # torch renames ranks' threads: no name filter
        if proc.pid in known or proc.pid == me:
            continue
        try:
            info = read_process(proc.pid, host, launchers)
        except (psutil.Error, OSError):
            continue
        if info.job_id not in job_ids or info.rank is None:
            continue
        if nodes is None or info.group_rank in nodes:
            found.append(info)
    return [p for p in found if not _is_worker(p, found)]


def covers_world(processes: list[RankProcess]) -> bool:
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


def spans_hosts(processes: list[RankProcess], host: str) -> str | None:
    """What says the job is larger than this host, or None when it fits on it.

    The launcher's layout decides first: fewer local ranks than WORLD_SIZE, a node index
    above 0 or several, more than one Slurm node. Without one, a MASTER_ADDR that is neither
    loopback nor this host's puts rank 0 elsewhere. Where the variables disagree the job is
    taken as larger: a rank not inspected is then "not seen", never "exited".
    """
    world = max((p.world_size for p in processes if p.world_size), default=0)
    local = max((p.local_world_size for p in processes if p.local_world_size), default=0)
    groups = sorted({p.group_rank for p in processes if p.group_rank is not None})
    nodes = max((p.nodes for p in processes if p.nodes), default=0)
    if local and local < world:
        return f"LOCAL_WORLD_SIZE is {local} of WORLD_SIZE {world}"
    if groups and (len(groups) > 1 or groups[0] > 0):
        return f"GROUP_RANK (or SLURM_NODEID) is {', '.join(map(str, groups))}"
    if nodes > 1:
        return f"SLURM_NNODES is {nodes}"
    if local >= world > 0:
        return None
    masters = {(p.master or "").rpartition(":")[0] for p in processes} - {""}
    elsewhere = sorted(m for m in masters if not m.startswith(_LOOPBACK) and not _is_host(m, host))
    return f"MASTER_ADDR {elsewhere[0]} is another host" if elsewhere else None


def _is_host(address: str, host: str) -> bool:
    """Whether an address or name is this host's (its name, or an address of its own)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address.split(".")[0] == host.split(".")[0]
    ours = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return str(ip) in ours


def missing_ranks(processes: list[RankProcess], host: str) -> tuple[list[MissingRank], list[int]]:
    """Ranks of the world with no live process, and the ranks not inspected because they
    run on other hosts (`spans_hosts`). On one host every absent rank is missing; across
    hosts only the local ranks of this host with no process are (the others may well be
    alive there). None is missing while live processes whose rank is unknown could hold
    them all."""
    sizes = {p.world_size for p in processes if p.world_size}
    if not sizes:
        return [], []
    world = max(sizes)
    present = {p.rank for p in processes if p.rank is not None and p.status != psutil.STATUS_ZOMBIE}
    absent = sorted(set(range(world)) - present)
    unnamed = sum(1 for p in processes if p.rank is None and p.status != psutil.STATUS_ZOMBIE)
    if not absent or len(absent) <= unnamed:
        # mp.spawn's ranks carry no RANK: live processes of unknown rank may be them all.
        return [], []
    if spans_hosts(processes, host) is None:
        reason = f"WORLD_SIZE is {world} and no live process on {host} holds this rank"
        return [
            MissingRank(rank=r, world_size=world, scope="host", reason=reason) for r in absent
        ], []
    local_sizes = {p.local_world_size for p in processes if p.local_world_size}
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
    return missing, absent
