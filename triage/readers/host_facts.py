"""The environment a job runs in, read from this host: each rank's variables and limits
(/proc/PID/environ, limits, maps, its root and network namespace) and the host's facts
(interfaces, /dev/shm, /sys/class/infiniband, the master's port, nvidia-smi).

Most launch and transport failures are settings: a socket interface name that does not
exist on this host, WORLD_SIZE or NCCL_* differing between ranks, two ranks mapped to
one GPU, a 64 MB /dev/shm in a container, a memlock limit too low for InfiniBand.

Read-only: no process is signalled, the master's port is only connected to (never sent
data), and secret-looking variables never leave the host (their values are redacted).
What the rules share about these facts is `triage.readers.environment`.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import shutil
import socket
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import psutil

from triage.observations import EnvironmentFacts, Gpu, GpuProcess, IbPort, Interface, MasterCheck
from triage.readers import early_commands
from triage.readers.net_interfaces import is_virtual_interface
from triage.redact import is_secret_name
from triage.text import bound_text, plural

_EXACT = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "OMP_NUM_THREADS",
        "USE_LIBUV",
        "NVIDIA_VISIBLE_DEVICES",
        "PMI_RANK",
        "PMI_SIZE",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_JOB_ID",
        "SLURM_JOB_NUM_NODES",
        "SLURM_STEP_GPUS",
    }
)
_PREFIXES = (
    "NCCL_",
    "TORCH_",
    "TORCHELASTIC_",
    "PYTORCH_",
    "CUDA_",
    "GLOO_",
    "UCX_",
    "FI_",
    "OMPI_COMM_WORLD_",
)
MAX_VALUE = 256
MAX_VARIABLES = 200
CONNECT_TIMEOUT_S = 1.0
LOOKUP_TIMEOUT_S = 3.0
MAX_MASTERS = 4
SMI_TIMEOUT_S = 10.0
#: Where the NVIDIA driver puts one device file per GPU (`/dev/nvidia0`, ...).
DEVICE_DIR = Path("/dev")
T = TypeVar("T")


class Unread(NamedTuple):
    """A host fact that could not be read, and what the user can do about it."""

    source: str
    reason: str
    hint: str | None = None


def pick_variables(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The variables that shape a distributed job, with secret-looking values redacted."""
    names = sorted(n for n in env if n in _EXACT or n.startswith(_PREFIXES))[:MAX_VARIABLES]
    redacted = [n for n in names if is_secret_name(n)]
    values = {n: "<redacted>" if n in redacted else env[n][:MAX_VALUE] for n in names}
    return values, redacted


def _int(env: dict[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _memlock(limits_text: str) -> tuple[int | None, bool | None]:
    """Soft 'Max locked memory' from /proc/PID/limits: (bytes, unlimited)."""
    for line in limits_text.splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory") :].split()[0]
            if soft == "unlimited":
                return None, True
            return (int(soft), False) if soft.isdigit() else (None, None)
    return None, None


def _host_memlock() -> tuple[int | None, bool | None]:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return (None, True) if soft == resource.RLIM_INFINITY else (int(soft), False)


_TORCH_LIB = re.compile(r"(?P<root>/\S*/torch)/lib/libtorch\w*\.so")
_NCCL_LIB = re.compile(r"(?P<path>/\S*/libnccl\.so(?:\.[\d.]+)?)")
_VERSION_PY = re.compile(r"""^__version__\s*=\s*['"](?P<v>[^'"]+)['"]""", re.MULTILINE)


def _versions(maps_text: str, root: str) -> tuple[str | None, str | None]:
    """torch and NCCL versions from the libraries a process has mapped, read through its
    root (/proc/PID/root) so a rank in a container is read in its own file system."""
    torch_version = nccl_version = None
    torch_lib = _search_lines(_TORCH_LIB, maps_text, "/lib/libtorch")
    if torch_lib:
        torch_version = _once(f"{root}{torch_lib['root']}/version.py", _torch_version)
    nccl_lib = _search_lines(_NCCL_LIB, maps_text, "/libnccl.so")
    if nccl_lib:
        path = Path(f"{root}{nccl_lib['path']}")
        numbered = re.search(r"\.so\.(\d+\.\d+\.\d+)$", path.name)
        if numbered:
            nccl_version = numbered.group(1)
        elif len(path.parents) > 3:  # pip's nvidia-nccl wheel: site-packages/nvidia/nccl/lib
            nccl_version = _once(str(path.parents[3]), _nccl_wheel_version)
    return torch_version, nccl_version


def _search_lines(pattern: re.Pattern[str], text: str, needle: str) -> re.Match[str] | None:
    """`pattern.search(text)` for a pattern that never spans lines, tried only on the lines
    holding `needle`: a rank maps hundreds of files, and a search from every slash of
    them cost more than the rest of the rank's facts."""
    at = text.find(needle)
    while at != -1:
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        found = pattern.search(text, text.rfind("\n", 0, at) + 1, end)
        if found:
            return found
        at = text.find(needle, end)
    return None


#: Versions by the identity of the file or folder they were read from: every rank maps the
#: same libraries, each rank through its own /proc/PID/root (see `_once`).
_read_once: dict[tuple[int, int, int, int], str | None] = {}


def _once(path: str, read: Callable[[str], str | None]) -> str | None:
    """`read(path)`, once per file (device, inode, mtime, size) however many ranks name it;
    None when the path is gone."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)
    if key not in _read_once:
        _read_once[key] = read(path)
    return _read_once[key]


def _torch_version(version_py: str) -> str | None:
    try:
        found = _VERSION_PY.search(Path(version_py).read_text(errors="replace"))
    except OSError:
        return None
    return found["v"] if found else None


def _nccl_wheel_version(site_packages: str) -> str | None:
    """The version of pip's nvidia-nccl wheel installed in a site-packages folder."""
    infos = sorted(Path(site_packages).glob("nvidia_nccl_cu*-*.dist-info"))
    return wheel_version(infos[-1].name) if infos else None


def wheel_version(dist_info: str) -> str:
    """`nvidia_nccl_cu13-2.30.7.dist-info` -> `2.30.7` (the hyphen in `dist-info` is not a
    field separator)."""
    return dist_info.removesuffix(".dist-info").split("-", 1)[-1]


def _shm(root: str) -> tuple[int | None, int | None]:
    """Size and free space of /dev/shm as the process sees it (a container has its own)."""
    try:
        usage = shutil.disk_usage(f"{root}/dev/shm")
    except OSError:
        return None, None
    return usage.total, usage.free


def _own_network(pid: int) -> list[Interface]:
    """The interfaces of a rank's network namespace when it is not triage's (a container
    with its own network); empty when they share one, the host's list then applies."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            return []
        text = Path(f"/proc/{pid}/net/dev").read_text()
    except OSError:
        return []
    names = [line.split(":", 1)[0].strip() for line in text.splitlines()[2:] if ":" in line]
    return [
        Interface(name=n, loopback=n == "lo", virtual=is_virtual_interface(n) and n != "lo")
        for n in names
    ]


#: torch and NCCL versions already read, by what decides them (see `_same_libraries`).
VersionsSeen = dict[tuple[object, ...], tuple[str | None, str | None]]

#: The variables that choose which torch and libnccl a Python process loads.
_LIBRARY_VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "NCCL_HOME")


def _same_libraries(proc: psutil.Process, env: dict[str, str], root: str) -> tuple[object, ...]:
    """What makes two ranks load the same torch and libnccl: one launcher, one executable,
    the same library variables, one file system. A launcher's workers differ only in their
    rank variables, so a 32-rank node reads one rank's maps, not 32 (/proc/PID/maps of a
    torch process is thousands of lines: most of this tool's time at 32 ranks)."""
    try:
        mounted = os.stat(root)
        return (
            proc.ppid(),
            proc.exe(),
            (mounted.st_dev, mounted.st_ino),
            *(env.get(name) for name in _LIBRARY_VARIABLES),
        )
    except (OSError, psutil.Error):
        return (proc.pid,)


def read_rank(pid: int, host: str, versions_seen: VersionsSeen | None = None) -> EnvironmentFacts:
    """One rank's facts; raises psutil errors for the caller to explain. `versions_seen`
    carries the versions read from earlier ranks of the same launch."""
    proc = psutil.Process(pid)
    env = proc.environ()
    variables, redacted = pick_variables(env)
    root = f"/proc/{pid}/root"
    no_limit: tuple[int | None, bool | None] = (None, None)
    no_versions: tuple[str | None, str | None] = (None, None)
    memlock, unlimited = _read(f"/proc/{pid}/limits", _memlock, no_limit)
    seen = versions_seen if versions_seen is not None else {}
    libraries = _same_libraries(proc, env, root)
    if libraries not in seen:
        seen[libraries] = _read(
            f"/proc/{pid}/maps", lambda text: _versions(text, root), no_versions
        )
    torch_version, nccl_version = seen[libraries]
    shm_total, shm_free = _shm(root)
    return EnvironmentFacts(
        scope="rank",
        host=host,
        pid=pid,
        rank=_int(env, "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"),
        local_rank=_int(env, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"),
        world_size=_int(env, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"),
        local_world_size=_int(env, "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        variables=variables,
        redacted=redacted,
        memlock_bytes=memlock,
        memlock_unlimited=unlimited,
        torch_version=torch_version,
        nccl_version=nccl_version,
        shm_total_bytes=shm_total,
        shm_free_bytes=shm_free,
        interfaces=_own_network(pid),
    )


def _read(path: str, parse: Callable[[str], T], default: T) -> T:
    """Parse a /proc file; a vanished or unreadable file gives the default."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return default
    return parse(text)


def interfaces() -> list[Interface]:
    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    out = []
    for name in sorted(set(addrs) | set(stats)):
        ips = [
            a.address
            for a in addrs.get(name, [])
            if a.family in (socket.AF_INET, socket.AF_INET6) and a.address
        ]
        stat = stats.get(name)
        out.append(
            Interface(
                name=name,
                addresses=ips,
                up=stat.isup if stat else None,
                mtu=stat.mtu if stat else None,
                loopback=name == "lo" or any(ip.startswith(("127.", "::1")) for ip in ips),
                virtual=is_virtual_interface(name) and name != "lo",
            )
        )
    return out


def ib_ports(root: Path = Path("/sys/class/infiniband")) -> list[IbPort]:
    ports = []
    for port_dir in sorted(root.glob("*/ports/*")):
        try:
            state = (port_dir / "state").read_text().strip()
        except OSError:
            continue
        try:
            layer: str | None = (port_dir / "link_layer").read_text().strip()
        except OSError:
            layer = None
        ports.append(
            IbPort(
                device=port_dir.parent.parent.name,
                port=int(port_dir.name) if port_dir.name.isdigit() else 0,
                state=state.split(":", 1)[-1].strip(),
                link_layer=layer,
            )
        )
    return ports


def _lookup(address: str, port: int) -> list[tuple[Any, ...]]:
    return socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)


def check_master(address: str, port: int) -> MasterCheck:
    """Connect and close: tells refused, filtered and unresolvable apart; sends nothing.

    The name lookup runs in a thread so a dead DNS server costs seconds, not minutes.
    """
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        infos = pool.submit(_lookup, address, port).result(timeout=LOOKUP_TIMEOUT_S)
    except (socket.gaierror, UnicodeError) as exc:
        return MasterCheck(address=address, port=port, status="unresolvable", detail=str(exc))
    except FutureTimeout:
        return MasterCheck(
            address=address, port=port, status="unresolvable", detail="name lookup timed out"
        )
    finally:
        pool.shutdown(wait=False)
    results = [_connect(address, port, info) for info in infos[:4]]
    return next((r for r in results if r.status == "reachable"), results[0])


def _connect(address: str, port: int, info: tuple[Any, ...]) -> MasterCheck:
    """One address of the master: localhost may resolve to ::1 and 127.0.0.1, try each."""
    family, kind, proto, _, target = info
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(target)
        except ConnectionRefusedError:
            return MasterCheck(address=address, port=port, status="refused")
        except TimeoutError:
            return MasterCheck(
                address=address, port=port, status="timeout", detail=f"{CONNECT_TIMEOUT_S}s"
            )
        except OSError as exc:
            unreachable = exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
            return MasterCheck(
                address=address,
                port=port,
                status="unreachable" if unreachable else "error",
                detail=exc.strerror or str(exc),
            )
    return MasterCheck(address=address, port=port, status="reachable")


def _smi(binary: str, *args: str) -> str | None:
    """nvidia-smi's answer, taken over from the console script's early start when it made
    one (`early_commands`), else asked now; None when it fails."""
    early = early_commands.take((binary, *args), SMI_TIMEOUT_S)
    if early is not None:
        code, stdout = early
        return stdout if code == 0 else None
    try:
        done = subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _number(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def nvidia_facts(binary: str) -> tuple[list[Gpu] | None, list[GpuProcess], str | None]:
    """GPUs, the processes holding their memory, and the topology matrix; GPUs are None
    when nvidia-smi fails (no driver loaded, a GPU fallen off the bus)."""
    gpu_query, apps_query, topology_query = early_commands.SMI_QUERIES
    listing = _smi(binary, *gpu_query)
    if listing is None:
        return None, [], None
    gpus = []
    for line in listing.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 5 and cells[0].isdigit():
            gpus.append(
                Gpu(
                    index=int(cells[0]),
                    name=cells[1],
                    bus_id=cells[2],
                    memory_used_mib=_number(cells[3]),
                    memory_total_mib=_number(cells[4]),
                )
            )
    processes = []
    apps = _smi(binary, *apps_query)
    for line in (apps or "").splitlines():
        cells = [c.strip() for c in line.split(",", 3)]
        if len(cells) == 4 and cells[0].isdigit():
            processes.append(
                GpuProcess(
                    pid=int(cells[0]), bus_id=cells[1], used_mib=_number(cells[2]), name=cells[3]
                )
            )
    topology = _smi(binary, *topology_query)
    return gpus, processes, bound_text(topology, 3000) if topology else None


def nvidia_devices() -> int:
    """The GPUs the driver exposes here: nvidia-smi missing on a host without any is no
    gap (a CPU job on gloo), while a GPU host without it leaves its GPUs unchecked."""
    return sum(1 for path in DEVICE_DIR.glob("nvidia*") if path.name[6:].isdigit())


def read_host(host: str, ranks: list[EnvironmentFacts]) -> tuple[EnvironmentFacts, list[Unread]]:
    """This host's facts, and what could not be read. Without ranks, this process's own
    environment stands in for the job's (triage run from the job's shell or batch script)."""
    unread: list[Unread] = []
    variables, redacted = ({}, []) if ranks else pick_variables(dict(os.environ))
    memlock, unlimited = _host_memlock()
    shm_total, shm_free = _shm("")
    if shm_total is None:
        unread.append(Unread("/dev/shm", "/dev/shm is missing or unreadable"))
    sources = ranks or [EnvironmentFacts(scope="rank", host=host, variables=variables)]
    masters = sorted(
        {
            (f.variables["MASTER_ADDR"], int(f.variables["MASTER_PORT"]))
            for f in sources
            if f.variables.get("MASTER_ADDR") and f.variables.get("MASTER_PORT", "").isdigit()
        }
    )[:MAX_MASTERS]
    gpus: list[Gpu] | None = None
    gpu_processes: list[GpuProcess] = []
    topology = None
    smi = shutil.which("nvidia-smi")
    devices = nvidia_devices()
    if smi:
        gpus, gpu_processes, topology = nvidia_facts(smi)
        if gpus is None:
            unread.append(
                Unread(
                    "nvidia-smi",
                    "nvidia-smi failed: GPUs not listed",
                    "run `nvidia-smi` on the host: a driver/library mismatch or a lost GPU shows there",
                )
            )
    elif devices:
        unread.append(
            Unread(
                "nvidia-smi",
                f"nvidia-smi not found: {plural(devices, 'GPU')} here, their processes and "
                "topology not checked",
            )
        )
    facts = EnvironmentFacts(
        scope="host",
        host=host,
        variables=variables,
        redacted=redacted,
        memlock_bytes=memlock,
        memlock_unlimited=unlimited,
        interfaces=interfaces(),
        shm_total_bytes=shm_total,
        shm_free_bytes=shm_free,
        ib_ports=ib_ports(),
        masters=[check_master(addr, port) for addr, port in masters],
        gpus=gpus,
        nvidia_devices=devices,
        gpu_processes=gpu_processes,
        topology=topology,
    )
    return facts, unread
