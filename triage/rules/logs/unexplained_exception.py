"""config.unknown from logs, as a last resort: an exception stopped the job and no rule
reads it."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import (
    exception_line,
    first_exception,
    ranks_of,
    signals,
    tracebacks,
)


@rule("logs.unexplained_exception", "config.unknown", last_resort=True)
def unexplained_exception(evidence: EvidenceSet) -> Iterator[Finding]:
    """An ordinary exception stopped a rank, and no rule names its cause.

    What it detects:
    The first exception in the text (a traceback, or its last line pasted alone:
    `RuntimeError: ...`) when no other rule finds anything. It stands only then: any other
    finding, of any family, replaces it. Without an exception, weaker (0.08): a traceback
    cut before its exception line, or a line marked as an error (`ERROR`, `FATAL`, `error:`)
    in words no signature reads.

    Why it happens:
    Most exceptions that end a distributed job without a timeout, an NCCL error or an OOM
    are its code and its setup disagreeing: arguments the launcher passes, variables it
    sets, devices, sizes and shapes the code assumes for this world size.

    Evidence:
    The first exception's type and message, its rank and its innermost user frame; else the
    cut traceback's innermost frame, or the first error line.

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
    found = first_exception(evidence)
    if found is None:
        yield from _unread_failure(evidence)
        return
    item, first = found
    text, where = exception_line(first)
    frame = first.user_frame
    yield Finding(
        title=f"an exception stopped the job: {text[:120]}",
        summary=f"The first exception is `{text[:200]}`{where}; no rule names its cause, so"
        " the kind of failure is a guess: the job's code and its setup disagree, or (the"
        " other reading) a bug of the code that only stopped this rank.",
        ranks=ranks_of([first]),
        location=frame.location() if frame else None,
        confidence=0.12,
        evidence=[item.id],
        fix="Read the exception at its user frame against the launch: the world size, the"
        " devices per node, the sizes a checkpoint or mesh was made for; rerun with"
        " TORCH_DISTRIBUTED_DEBUG=DETAIL and every rank's log.",
        confirm="the exception names a size, device, variable or argument the launch sets",
    )


def _unread_failure(evidence: EvidenceSet) -> Iterator[Finding]:
    """A failure the text shows without its exception: a traceback cut before its last line
    (a paste that stopped short), or an error line no signature reads."""
    cut = [(e, t) for e, t in tracebacks(evidence, dumps=False) if not t.exception and t.frames]
    errors = signals(evidence, "generic.error_line")
    if cut:
        item, record = min(cut, key=lambda found: (found[1].path, found[1].line))
        frame = record.user_frame or record.frames[0]
        which = "user frame" if record.user_frame else "frame"
        seen = (
            f"a traceback cut before its exception line, its innermost {which} at"
            f" {frame.file}:{frame.line}"
        )
        ranks, location = ranks_of([record]), frame.location()
    elif errors:
        item, line = errors[0]
        seen = f"an error line no rule reads: `{line.text.strip()[:160]}`"
        ranks, location = ranks_of([line]), None
    else:
        return
    yield Finding(
        title="a failure without its exception, cause not visible",
        summary=f"The text shows {seen}; the exception that would name the failure is not in"
        " it, so the kind of failure is a guess.",
        ranks=ranks,
        location=location,
        confidence=0.08,
        evidence=[item.id],
        fix="Find the exception: the lines after this one in the rank's own log (the"
        " traceback ends with the exception's type and message), or every rank's log; then"
        " run triage on that.",
        confirm="the rank's full log holds an exception that names a size, device, variable"
        " or argument the launch sets",
    )
