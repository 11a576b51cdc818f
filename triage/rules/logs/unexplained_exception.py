"""config.unknown from logs, as a last resort: an exception stopped the job and no rule
reads it."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._unexplained import last_resort


@rule("logs.unexplained_exception", "config.unknown", last_resort=True)
def unexplained_exception(evidence: EvidenceSet) -> Iterator[Finding]:
    """An ordinary exception stopped a rank, and no rule names its cause.

    What it detects:
    The first exception in the text (a traceback, or its last line pasted alone:
    `RuntimeError: ...`) when no other rule finds anything. It stands only then: any other
    finding, of any family, replaces it. Without an exception, weaker (0.08): a traceback
    cut before its exception line, a line marked as an error (`ERROR`, `FATAL`, `error:`)
    or a line that says in plain words that something failed (`does not match`, `but
    current state is`, `Failed to ...`), in words no signature reads. Only when the
    failure's words point to no other family: a transport's, a wait's and memory's are
    logs.unexplained_transport's, logs.unexplained_wait's and logs.unexplained_memory's.

    Why it happens:
    Most exceptions that end a distributed job without a timeout, an NCCL error or an OOM
    are its code and its setup disagreeing: arguments the launcher passes, variables it
    sets, devices, sizes and shapes the code assumes for this world size.

    Evidence:
    The first exception's type and message, its rank and its innermost user frame; else the
    cut traceback's innermost frame, or the first error or failure line.

    Fix:
    Read the exception at its user frame against the launch: the world size, the
    devices per node, the sizes a checkpoint or mesh was made for. Rerun that rank with
    TORCH_DISTRIBUTED_DEBUG=DETAIL, and collect every rank's log to see which failed first.

    Known false positives:
    An exception that is a symptom of an earlier failure the text does not hold (a peer
    that died first, memory that ran out); a wrong result that surfaced as a shape error.

    References:
    https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
    """
    found = last_resort(evidence, "config")
    if found is not None:
        yield found
