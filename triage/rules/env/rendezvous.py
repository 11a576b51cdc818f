"""comm.rendezvous from the environment: the ranks' MASTER_ADDR does not resolve, or its
port does not accept connections while the job runs."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.environment import environment_view
from triage.registry import EvidenceSet, rule

#: status -> (confidence with live ranks, confidence from the host's own environment, meaning)
_STATUS = {
    "unresolvable": (0.65, 0.5, "does not resolve to an address"),
    "unreachable": (0.55, 0.35, "is unreachable (no route)"),
    "timeout": (0.5, 0.3, "does not answer (connection timed out: firewall or wrong address)"),
    "refused": (0.4, 0.0, "refuses connections (nothing listens on the port)"),
}


@rule("env.rendezvous", "comm.rendezvous")
def rendezvous(evidence: EvidenceSet) -> Iterator[Finding]:
    """The master the ranks rendezvous at cannot be reached from this host.

    What it detects:
    MASTER_ADDR:MASTER_PORT as the ranks' environment gives it (or this shell's, when no
    ranks were given): the name does not resolve, the host is unreachable, the connect
    times out (a firewall drops it), or it is refused while the job's ranks are alive.

    Why it happens:
    A hostname only the launching machine knows, a firewall between nodes, the wrong
    address of a multi-homed master, or the store's host (rank 0 / the torchrun agent)
    gone or listening elsewhere.

    Evidence:
    A TCP connect (no data sent) with a 1 s timeout from this host.

    Fix:
    Use an address every node resolves and routes to (an IP on the data network), open
    MASTER_PORT (and the NCCL/gloo ephemeral ports) between the nodes, and check that the
    master's process is alive.

    Known false positives:
    Refused is normal when the job has finished or not started; it is only reported with
    live ranks, and then rank 0 may simply have exited (see hang.rank_exited).

    References:
    torch.distributed docs, "Environment variable initialization"; TCPStore.
    """
    view = environment_view(evidence)
    if view.host is None:
        return
    host_evidence, host = view.host
    live = bool(view.ranks)
    for check in host.masters:
        if check.status not in _STATUS:
            continue
        with_ranks, alone, meaning = _STATUS[check.status]
        confidence = with_ranks if live else alone
        if confidence <= 0:
            continue
        target = f"{check.address}:{check.port}"
        yield Finding(
            title=f"the master {target} {meaning}",
            summary=f"MASTER_ADDR:MASTER_PORT {target} {meaning} from {host.host}"
            + (f" ({check.detail})" if check.detail else "")
            + ("." if live else "; checked from this shell's environment, no ranks given."),
            confidence=confidence,
            evidence=[host_evidence.id] + [e.id for e, _ in view.ranks],
            fix="Use a MASTER_ADDR every node resolves and routes to, open MASTER_PORT between the "
            "nodes, and check that the master's process (rank 0 or the torchrun agent) is alive.",
            confirm=f"`nc -zv {check.address} {check.port}` fails from the other nodes too",
        )
