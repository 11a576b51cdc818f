"""hang.unknown from logs, as a last resort: a failure in a wait's words that no rule reads."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._unexplained import last_resort


@rule("logs.unexplained_wait", "hang.unknown", last_resort=True)
def unexplained_wait(evidence: EvidenceSet) -> Iterator[Finding]:
    """The first failure no rule names says a wait did not end in time.

    What it detects:
    The text's first exception (or, without one, its first error line or line that says
    something failed) when no other rule finds anything and its words are a wait's: timed
    out, a timeout, a deadline, stuck, stalled, did not return, not responding, hung, in no
    transport's words (those are logs.unexplained_transport's). 0.12 with an exception,
    0.08 with a line alone; any other finding replaces it.

    Why it happens:
    Some process did not reach the point the others wait at (a rank elsewhere, a worker
    gone, a step that takes longer than the timeout), and the wait ran out; the line that
    would say which process, or why, is not in the text.

    Evidence:
    The exception or the line, its rank and its innermost user frame.

    Fix:
    Gather what tells the processes apart: every rank's log, py-spy stacks of the live
    ranks (`triage hang --pids ...`), Flight Recorder dumps, or a rerun with
    TORCH_DISTRIBUTED_DEBUG=DETAIL.

    Known false positives:
    A timeout that is only slow work (a first compile, a large checkpoint) under a short
    limit; an exception that only mentions a timeout setting.

    References:
    https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
    """
    found = last_resort(evidence, "hang")
    if found is not None:
        yield found
