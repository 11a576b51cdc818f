"""comm.infiniband from the environment: InfiniBand in use with a low memlock limit, an
NCCL_IB_HCA that names no HCA of this host, or every IB port down."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.observations import EnvironmentFacts
from triage.readers.environment import environment_view, ranks_of, select_interfaces, who
from triage.registry import EvidenceSet, rule
from triage.text import plural

LOW_MEMLOCK = 1 << 30
_PORT = re.compile(r":\d+")


@rule("env.infiniband", "comm.infiniband")
def infiniband(evidence: EvidenceSet) -> Iterator[Finding]:
    """InfiniBand/RoCE is in use but the ranks cannot register memory or find their HCA.

    What it detects:
    This host has InfiniBand/RoCE ports and NCCL_IB_DISABLE is not set, and: the ranks'
    memlock limit (RLIMIT_MEMLOCK, from /proc/PID/limits) is below 1 GiB instead of
    unlimited; or NCCL_IB_HCA selects no HCA of this host; or every port is down.

    Why it happens:
    RDMA pins (locks) the buffers it registers; containers and systemd units default to a
    64 KiB-8 MiB memlock limit, so NCCL's `ibv_reg_mr` or QP creation fails (`Cannot
    allocate memory`) or NCCL falls back to sockets. HCA names copied from another cluster
    (mlx5_0 vs mlx5_bond_0) select nothing; a port down leaves no path.

    Evidence:
    The ranks' memlock limits, NCCL_IB_* variables, /sys/class/infiniband port states.

    Fix:
    Raise the memlock limit to unlimited for the job (`ulimit -l unlimited`, docker
    `--ulimit memlock=-1:-1`, `LimitMEMLOCK=infinity` for systemd/slurmd, Kubernetes
    privileged or IPC_LOCK); set NCCL_IB_HCA to this host's HCAs (`ibv_devinfo`); bring
    the ports up, or NCCL_IB_DISABLE=1 to run over sockets.

    Known false positives:
    A limit of a few GiB is often enough; only limits under 1 GiB are reported. Hosts whose
    IB ports serve storage only, while NCCL uses another network, are flagged too.

    References:
    NCCL troubleshooting, "InfiniBand" (memlock, `ulimit -l`); NCCL_IB_HCA, NCCL_IB_DISABLE.
    """
    view = environment_view(evidence)
    if view.host is None or not view.host[1].ib_ports:
        return
    host_evidence, host = view.host
    sources = [f for _, f in view.ranks] or [host]
    if any(
        f.variables.get("NCCL_IB_DISABLE") == "1"
        or f.variables.get("NCCL_NET", "").lower() == "socket"
        for f in sources
    ):
        return
    evidence_ids = [e.id for e, _ in view.ranks] + [host_evidence.id]
    active = [p for p in host.ib_ports if p.state.upper() == "ACTIVE"]
    devices = sorted({p.device for p in host.ib_ports})
    hca = {f.variables["NCCL_IB_HCA"] for f in sources if f.variables.get("NCCL_IB_HCA")}
    for value in sorted(hca):
        if not select_interfaces(_PORT.sub("", value), devices):
            yield _finding(
                0.65,
                f"NCCL_IB_HCA={value} selects no HCA of {host.host} (has {', '.join(devices)})",
                sources,
                evidence_ids,
                "Set NCCL_IB_HCA to this host's HCA names (`ibv_devinfo` or `ls /sys/class/infiniband`), "
                "or unset it to let NCCL pick.",
            )
    if not active:
        yield _finding(
            0.45,
            f"every InfiniBand port of {host.host} is down ({', '.join(f'{p.device}:{p.port} {p.state}' for p in host.ib_ports)})",
            sources,
            evidence_ids,
            "Bring the IB ports up (`ibstat`, the subnet manager, cabling), or set NCCL_IB_DISABLE=1 "
            "to run over sockets.",
        )
        return
    low = [
        f for f in sources if f.memlock_unlimited is False and (f.memlock_bytes or 0) < LOW_MEMLOCK
    ]
    if low:
        limit = min(f.memlock_bytes or 0 for f in low)
        yield _finding(
            0.6,
            f"memlock limit {limit // 1024} KiB on {who(low)} is too low for RDMA "
            f"({plural(len(active), 'active IB port')})",
            low,
            evidence_ids,
            "Raise the memlock limit to unlimited for the job: `ulimit -l unlimited`, docker "
            "`--ulimit memlock=-1:-1`, `LimitMEMLOCK=infinity` for systemd/slurmd, IPC_LOCK in "
            "Kubernetes.",
        )


def _finding(
    confidence: float, what: str, holders: list[EnvironmentFacts], evidence_ids: list[str], fix: str
) -> Finding:
    return Finding(
        title=what,
        summary=f"{what}.",
        ranks=ranks_of(holders),
        confidence=confidence,
        evidence=evidence_ids,
        fix=fix,
        confirm="NCCL_DEBUG=INFO shows `NET/IB` errors (ibv_reg_mr / ibv_create_qp failed, "
        "Cannot allocate memory) or a fallback to NET/Socket",
    )
