"""hang.unknown from logs, as a last resort: the scheduler ended the job at its time limit."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids, signals


@rule("logs.time_limit", "hang.unknown", last_resort=True)
def time_limit(evidence: EvidenceSet) -> Iterator[Finding]:
    """The scheduler cancelled the job at its time limit, and nothing else is in the text.

    What it detects:
    Slurm's `CANCELLED AT ... DUE TO TIME LIMIT`, when no other rule finds anything.

    Why it happens:
    Either the job hung (every rank waiting, no error, until the limit) or it needed more
    time than it asked for; the text alone does not tell which.

    Evidence:
    The scheduler's cancellation line.

    Fix:
    Compare the job's last progress line with the time of the cancellation: a long silence
    before it is a hang (rerun with a collective timeout under the time limit, and take
    `triage hang` stacks while it stalls); steady progress up to it means too little time.

    Known false positives:
    A job that was simply too long for its limit.

    References:
    https://slurm.schedmd.com/sbatch.html#OPT_time
    """
    found = signals(evidence, "scheduler.time_limit")
    if not found:
        return
    yield Finding(
        title="the scheduler cancelled the job at its time limit: it hung, or ran too long",
        summary=f"`{found[0][1].text[:160]}`: the job ran until its time limit with no error"
        " in the text, which a hang and a job that needs more time both explain.",
        ranks=[],
        confidence=0.1,
        evidence=ids(found[:2]),
        fix="Compare the last progress line's time with the cancellation: a long silence"
        " before it is a hang (set the process-group timeout under the time limit so a"
        " stalled collective fails with its own error, and take `triage hang` stacks while"
        " it stalls); steady progress up to it means the job needs a longer --time.",
        confirm="the last progress line is long before the cancellation",
    )
