"""The environment a job runs in: each rank's variables and limits, and this host's facts.

Most launch and transport failures are settings: a socket interface name that does not
exist on this host, WORLD_SIZE or NCCL_* differing between ranks, two ranks mapped to
one GPU, a 64 MB /dev/shm in a container, a memlock limit too low for InfiniBand. They
are read by `triage.readers.host_facts` from /proc/PID/environ and /proc/PID/limits of
each rank and from the host (interfaces, /dev/shm, /sys/class/infiniband, nvidia-smi
when it exists); this tool turns them into one evidence item per rank and one for the
host, and what could not be read into gaps.

Read-only: no process is signalled, the master's port is only connected to (never sent
data), and secret-looking variables never leave the host (their values are redacted).
"""

from __future__ import annotations

import socket

import psutil

from triage.models import Evidence, Gap
from triage.observations import EnvironmentFacts
from triage.readers.environment import differing, select_interfaces, spread
from triage.readers.host_facts import VersionsSeen, read_host, read_rank
from triage.registry import ToolError, ToolOutput, tool
from triage.text import plural

ENVIRON_HINT = (
    "reading /proc/PID/environ needs the job's user or root (CAP_SYS_PTRACE in a container)"
)


@tool(name="check_environment")
def check_environment(pids: list[int] | None = None) -> ToolOutput:
    """Compare the ranks' launch environment (RANK/WORLD_SIZE/MASTER_*, NCCL_*, TORCH_*,
    CUDA_VISIBLE_DEVICES, memlock limit, torch/NCCL versions) across ranks, and check this
    host: interfaces named by NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME, /dev/shm size,
    InfiniBand ports, MASTER_ADDR:MASTER_PORT reachability, GPUs (nvidia-smi). Read-only."""
    host = socket.gethostname()
    ranks: list[EnvironmentFacts] = []
    gaps: list[Gap] = []
    versions_seen: VersionsSeen = {}
    for pid in dict.fromkeys(pids or []):
        try:
            ranks.append(read_rank(pid, host, versions_seen))
        except psutil.NoSuchProcess:
            gaps.append(
                Gap(
                    source=f"pid:{pid}",
                    reason=f"pid {pid} does not exist (exited?)",
                    tool="check_environment",
                )
            )
        except psutil.AccessDenied:
            gaps.append(
                Gap(
                    source=f"pid:{pid}",
                    reason="permission denied reading its environment",
                    hint=ENVIRON_HINT,
                    tool="check_environment",
                )
            )
    if pids and not ranks and len(gaps) == len(set(pids)):
        raise ToolError(
            gaps[0].reason if len(gaps) == 1 else "none of the given pids could be read",
            gaps[0].hint,
        )
    ranks.sort(key=lambda f: (f.rank is None, f.rank if f.rank is not None else f.pid or 0))
    host_facts, unread = read_host(host, ranks)
    gaps += [
        Gap(source=u.source, reason=u.reason, hint=u.hint, tool="check_environment") for u in unread
    ]
    evidence = [_rank_evidence(f) for f in ranks] + [_host_evidence(host_facts, ranks)]
    lines = [e.summary for e in evidence]
    for name, values in differing(ranks).items():
        quoted = {repr(value): holders for value, holders in values.items()}
        lines.append(f"differs across ranks: {name}: {spread(quoted)}")
    return ToolOutput(evidence=evidence, gaps=gaps, text="\n".join(lines))


def _size(value: int | None) -> str:
    if value is None:
        return "?"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value} B"


def _rank_evidence(f: EnvironmentFacts) -> Evidence:
    label = f"rank {f.rank}" if f.rank is not None else "rank unknown"
    world = f"/{f.world_size}" if f.world_size is not None else ""
    shown = [
        f"{n}={f.variables[n]}"
        for n in (
            "LOCAL_RANK",
            "CUDA_VISIBLE_DEVICES",
            "NCCL_SOCKET_IFNAME",
            "GLOO_SOCKET_IFNAME",
            "MASTER_ADDR",
            "MASTER_PORT",
        )
        if n in f.variables
    ]
    memlock = "unlimited" if f.memlock_unlimited else _size(f.memlock_bytes)
    versions = ", ".join(
        f"{lib} {v}" for lib, v in (("torch", f.torch_version), ("NCCL", f.nccl_version)) if v
    )
    return Evidence(
        id=f"env:pid{f.pid}",
        kind=EnvironmentFacts.EVIDENCE_KIND,
        source=f"pid:{f.pid}",
        rank=f.rank,
        summary=f"{label}{world} (pid {f.pid}): {', '.join(shown) or 'no launcher variables'}; "
        f"memlock {memlock}" + (f"; {versions}" if versions else ""),
        data=f.model_dump(exclude_defaults=True),
    )


def _host_evidence(f: EnvironmentFacts, ranks: list[EnvironmentFacts]) -> Evidence:
    nics = ", ".join(
        f"{i.name} {'up' if i.up else 'down'}" + (f" mtu {i.mtu}" if i.mtu else "")
        for i in f.interfaces
    )
    selected = []
    for name, exact in (("NCCL_SOCKET_IFNAME", False), ("GLOO_SOCKET_IFNAME", True)):
        specs = {r.variables[name] for r in ranks or [f] if name in r.variables}
        for spec in sorted(specs):
            chosen = select_interfaces(spec, [i.name for i in f.interfaces], exact_only=exact)
            selected.append(f"{name}={spec} selects {', '.join(chosen) or 'nothing'}")
    ib = ", ".join(f"{p.device}:{p.port} {p.state}" for p in f.ib_ports) or "none"
    masters = ", ".join(f"{m.address}:{m.port} {m.status}" for m in f.masters)
    gpus = (
        plural(len(f.gpus), "GPU")
        if f.gpus is not None
        else "no NVIDIA GPU"
        if f.nvidia_devices == 0
        else "GPUs not listed (no nvidia-smi)"
    )
    parts = [
        f"interfaces: {nics or 'none'}",
        *selected,
        f"/dev/shm {_size(f.shm_total_bytes)} ({_size(f.shm_free_bytes)} free)",
        f"memlock {'unlimited' if f.memlock_unlimited else _size(f.memlock_bytes)}",
        f"InfiniBand: {ib}",
        *([f"master {masters}"] if masters else []),
        gpus,
    ]
    return Evidence(
        id="env:host",
        kind=EnvironmentFacts.EVIDENCE_KIND,
        source=f.host,
        summary=f"host {f.host}: " + "; ".join(parts),
        data=f.model_dump(exclude_defaults=True),
    )
