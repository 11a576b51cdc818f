"""comm.unknown from logs, as a last resort: a failure in a transport's words that no rule
reads."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._unexplained import last_resort


@rule("logs.unexplained_transport", "comm.unknown", last_resort=True)
def unexplained_transport(evidence: EvidenceSet) -> Iterator[Finding]:
    """The first failure no rule names speaks of a socket, a connection or a transport.

    What it detects:
    The text's first exception (or, without one, its first error line or line that says
    something failed) when no other rule finds anything and its words are a transport's: a
    socket, a connection, a peer, a network, a communication library (NCCL, gloo, HCCL,
    RCCL, oneCCL, MPI), InfiniBand or RDMA words, a rendezvous, a handshake. 0.12 with an
    exception, 0.08 with a line alone; any other finding replaces it.

    Why it happens:
    A transport failed in words no signature knows: a library's version or platform this
    tool has no reading for, a message cut before the line that says why.

    Evidence:
    The exception or the line, its rank and its innermost user frame.

    Fix:
    Rerun with NCCL_DEBUG=INFO, TORCH_CPP_LOG_LEVEL=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL,
    collect every rank's log, and read the first WARN or error before this line; check
    that every node reaches the others' address and port on the interface it uses.

    Known false positives:
    A transport's error that is the symptom of a peer that died first, whose log the text
    does not hold; an exception that only mentions a connection.

    References:
    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
    """
    found = last_resort(evidence, "comm")
    if found is not None:
        yield found
