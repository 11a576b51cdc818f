"""hang.rank_exited from logs, as a last resort: an ordinary exception ended a rank."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._unexplained import unexplained


@rule("logs.rank_raised", "hang.rank_exited", last_resort=True)
def rank_raised(evidence: EvidenceSet) -> Iterator[Finding]:
    """An ordinary exception ended a rank, and no rule reads more into it.

    What it detects:
    The first exception in the text (a traceback, or its last line pasted alone) that is
    not the launcher's or the interpreter's own stop, when no other rule finds anything. Not
    an exception in a wait's words (`TimeoutError`, `timed out waiting for ...`): a wait
    that ran out is the symptom of what it waited for (logs.unexplained_wait).
    logs.unexplained_exception reads the same exception as a setup error; the two stand
    side by side, that one first: read alone, an exception does not say whether the job
    hung behind it.

    Why it happens:
    In a distributed job an exception ends only the rank that raised it: a file missing on
    one node, an empty batch on a rank whose shard ran out, an assertion on local data. Its
    peers go on to the next collective and wait there for it until a timeout, or until the
    launcher tears them down. The job is then reported as hung, and the exception is the
    cause; the ranks' timeouts, when they come, are symptoms.

    Evidence:
    The exception's type and message, its rank and its innermost user frame.

    Fix:
    Fix the exception at its user frame; make the data every rank reads present and
    non-empty on every rank (a DistributedSampler, a dataset check before training), and let
    the launcher stop the other ranks when one fails (torchrun does, with its default
    --max-restarts 0).

    Known false positives:
    An exception raised on every rank alike (a setup error: logs.unexplained_exception's
    reading), or one that is the symptom of an earlier failure the text does not hold.

    References:
    https://pytorch.org/docs/stable/elastic/errors.html
    """
    failure = unexplained(evidence)
    if failure is None or failure.exception is None or failure.family == "hang":
        return  # a wait that ran out is a symptom of the rank it waited for
    text = failure.exception
    who = f"rank {failure.ranks[0]}" if failure.ranks else "the rank that raised it"
    yield Finding(
        title=f"an exception ended {who}: {text[:100]}",
        summary=f"{failure.seen} ended {who}. In a distributed job its peers then wait"
        " for it in their next collective until a timeout or the launcher stops them: if"
        " the job hung, this exception is the cause. If every rank raised it alike, it is"
        " a setup error instead.",
        ranks=failure.ranks,
        location=failure.location,
        confidence=0.11,
        evidence=[failure.item.id],
        fix="Fix the exception at its user frame, and make what it read present and"
        " non-empty on every rank (a file on every node, a shard for every rank).",
        confirm="the other ranks' stacks or logs: waiting in a collective (this rank exited"
        " under them), or the same exception on every rank (a setup error)",
    )
