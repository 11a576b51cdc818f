"""hang.unknown from logs, as a last resort: the job was stopped from outside (its time
limit, a Ctrl-C, a scheduler's signal) with no error of its own."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, ids, signals


@rule("logs.stopped_from_outside", "hang.unknown", last_resort=True)
def stopped_from_outside(evidence: EvidenceSet) -> Iterator[Finding]:
    """The job was stopped from outside, and nothing else is in the text.

    What it detects:
    Slurm's `CANCELLED AT ... DUE TO TIME LIMIT` and its plain `*** JOB 123 ON node-03
    CANCELLED AT ... ***` (scancel); torchrun's `Received SIGINT death signal,
    shutting down workers` (a Ctrl-C, SIGTERM or SIGHUP: a person or a scheduler stopped
    the launcher), when no other rule finds anything.

    Why it happens:
    A job that makes no progress is stopped by hand or runs into its time limit: either it
    hung (every rank waiting, no error) or it needed more time than it asked for; the
    text alone does not tell which.

    Evidence:
    The scheduler's cancellation line, the launcher's signal line.

    Fix:
    Compare the job's last progress line with the time it was stopped: a long silence
    before it is a hang (rerun with a collective timeout under the time limit, and take
    `triage hang` stacks while it stalls); steady progress up to it means too little time.

    Known false positives:
    A job that was simply too long for its limit, or stopped for another reason.

    References:
    https://slurm.schedmd.com/sbatch.html#OPT_time
    """
    limit = signals(evidence, "scheduler.time_limit")
    cancelled = signals(evidence, "scheduler.cancelled")
    stopped = [
        item
        for item in signals(evidence, "elastic.signal_received")
        if item[1].fields.get("signal") in ("SIGINT", "SIGTERM", "SIGHUP")
    ]
    found = limit or cancelled or stopped
    if not found:
        return
    preempted = [item for item in cancelled if item[1].fields.get("preempted")]
    if preempted and not limit:
        yield _preempted(preempted)
        return
    signal = ""
    if limit:
        how = "the scheduler cancelled the job at its time limit"
    elif cancelled:
        how = "the job was cancelled (scancel, by its user or an administrator)"
    else:
        signal = str(found[0][1].fields["signal"])
        how = f"the launcher was stopped by {signal}"
    hangup = (
        " SIGHUP is also what a launcher gets when the terminal or SSH session it runs in"
        " closes: start it under nohup, setsid, tmux or screen, or submit it to the scheduler."
        if signal == "SIGHUP"
        else ""
    )
    yield Finding(
        title=f"{how}: it hung, or ran too long" + (", or its terminal closed" if hangup else ""),
        summary=f"`{found[0][1].text[:160]}`: {how} with no error in the text before it, which"
        " a hang and a job that needs more time both explain.",
        ranks=[],
        confidence=0.1,
        evidence=ids(found[:2]),
        fix="Compare the last progress line's time with the stop: a long silence"
        " before it is a hang (set the process-group timeout under the time limit so a"
        " stalled collective fails with its own error, and take `triage hang` stacks while"
        " it stalls); steady progress up to it means the job needs more time (Slurm's --time)."
        + hangup,
        confirm="the last progress line is long before the stop",
    )


def _preempted(found: list[Signal]) -> Finding:
    """The scheduler took the job's resources for another (a higher-priority workload, a
    spot instance the cloud reclaimed): no failure of the job's own."""
    return Finding(
        title="the scheduler preempted the job: no failure of its own",
        summary=f"`{found[0][1].text[:160]}`: the job's resources were taken for another"
        " workload (a higher priority, or a spot instance the cloud reclaimed); its ranks were"
        " stopped from outside, not by an error.",
        ranks=[],
        confidence=0.1,
        evidence=ids(found[:2]),
        fix="Resume from the last checkpoint (checkpoint often enough to lose little), or run on"
        " capacity that is not preempted: a higher priority class or queue, on-demand instead"
        " of spot nodes.",
        confirm="the scheduler's record of the job (`sacct -j`, the Workload's conditions, the"
        " cloud's instance events) shows a preemption",
    )
