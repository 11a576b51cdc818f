"""hang.rank_exited from logs: a rank died while its peers waited for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._hang_lines import HangLog, hang_log
from triage.rules.logs._signals import signals
from triage.text import rank_label

# The NCCL watchdog aborts timed-out ranks with SIGABRT (-6) and the launcher stops the
# survivors with SIGTERM (-15): victims of the hang show these too.
_TEARDOWN = (-6, -15)


@dataclass
class _Death:
    rank: int | None
    local_rank: int | None
    how: str
    confidence: float
    evidence: str
    finished: bool = False


@rule("logs.rank_exited", "hang.rank_exited")
def rank_exited(evidence: EvidenceSet) -> Iterator[Finding]:
    """A rank died while the others waited in a collective for it.

    What it detects:
    The launcher's failure report names a rank (torchelastic `rank: N (local_rank: M)
    exitcode: X`, or `failed (exitcode: X) local_rank: M`) or a rank's own traceback ends
    in an error of its own, while other ranks time out or monitoredBarrier waits for it.
    Ranks that timed out themselves are victims, not culprits, whatever their exit code.
    Weaker (0.55; 0.5 beside a stuck watchdog), ranks whose process reached Python's exit
    (`destroy_process_group() was not called before program exit`) with no error while
    others time out or their watchdog gets stuck: they finished and left the others in a
    collective. Horovod's shut-down message with no rank's error in the text (0.5): a rank
    finished execution first.

    Why it happens:
    The rank crashed (an exception, a segfault), was killed (the host OOM killer's
    SIGKILL, a scheduler), or returned early. On NCCL its peers wait until the watchdog
    timeout and then abort with SIGABRT (-6).

    Evidence:
    Launcher report lines (exit code, signal, first observed failure), the rank's own
    traceback, and the timeouts on the other ranks.

    Fix:
    Fix the dead rank's own error: its traceback or exit code (-9/SIGKILL: the host OOM
    killer, `dmesg`); the waiting ranks are victims.

    Known false positives:
    A report that lists only the timed-out ranks' aborts, with the dead rank's log missing,
    gives no culprit; a local rank on a multi-node job is not a global rank.

    References:
    torch.distributed.elastic error files (@record); `dmesg | grep -i oom`.
    """
    view = hang_log(evidence)
    # A hung peer keeps its sockets open: only a process that is gone closes them.
    closed = view.lost_peer - set(view.own_errors)
    waiters = set(view.waiting) | closed
    stuck = {
        s.rank for _, s in signals(evidence, "hang.watchdog_stuck") if s.rank is not None
    } - waiters
    if not waiters and not view.barrier_missing and not stuck:
        yield from _horovod_finished(evidence)
        return
    # Without a timeout, a rank that raised or that the launcher names is a crash its peers
    # saw as a closed connection (comm.peer_failure); only a silent rank is read here.
    hung = bool(view.waiting or view.barrier_missing)
    deaths = (
        (_deaths(view) if hung else [])
        + _vanished(view, closed)
        + _finished(evidence, view, waiters | stuck)
    )
    if not deaths:
        yield from _horovod_finished(evidence)
        return
    top = max(d.confidence for d in deaths)
    chosen = [d for d in deaths if d.confidence == top]
    ranks = sorted({d.rank for d in chosen if d.rank is not None})
    local = sorted({d.local_rank for d in chosen if d.local_rank is not None})
    who = rank_label(ranks) if ranks else f"local {rank_label(local)}"
    waiting = sorted(view.waiting)
    lost = sorted(closed - set(view.waiting))
    one = len(ranks or local) == 1
    them = "it" if one else "them"
    if waiting:
        then = f"{rank_label(waiting)} waited for {them} in a collective and timed out"
    elif lost:
        then = f"{rank_label(lost)} lost the connection to {them}"
    else:
        then = f"{rank_label(sorted(stuck))}'s watchdog got stuck on collectives in flight"
    finished = all(d.finished for d in chosen)
    fix = (
        f"{who.capitalize()} finished while other ranks still had collectives in flight:"
        " find the collective the others wait in that these ranks never reached (an extra"
        " or skipped call, uneven data at the end), and end every rank together with"
        " dist.barrier() and dist.destroy_process_group() before exit."
        if finished
        else f"Find why {who} died: its own traceback or exit code (-9/SIGKILL is usually the "
        "host OOM killer: check `dmesg`); the ranks that timed out are victims."
    )
    yield Finding(
        title=f"{who} exited while {'its' if one else 'their'} peers waited in a collective",
        summary=f"{who.capitalize()} {chosen[0].how}, while {then}.",
        ranks=ranks,
        location=view.location(ranks),
        other_locations=[loc for loc in [view.location(sorted(view.waiting))] if loc],
        confidence=top,
        evidence=[d.evidence for d in chosen][:4]
        + [i for ids in view.waiting.values() for i in ids][:4],
        fix=fix,
        confirm=f"{who}'s log ends in its own error or the launcher reports its exit first",
    )


def _horovod_finished(evidence: EvidenceSet) -> Iterator[Finding]:
    """Horovod shuts every rank down once one rank raised or "finished execution" while
    others still submit collectives. With no rank's failure anywhere in the text (Horovod's
    launcher interleaves every rank's output), the one that finished is the better reading
    than a crash whose log is missing (comm.peer_failure's 0.45): one of the two."""
    shut = signals(evidence, "horovod.shut_down")
    view = comm_view(evidence)
    failures = [s for _, s in view.other_failures() if not s.peer_symptom]
    if not shut or view.origins or failures:
        return
    yield Finding(
        title="a rank finished while the others still ran collectives (Horovod shut down)",
        summary=(
            "Horovod shut down with no rank's own error in the text: its message names an "
            "exception on one rank or a collective submitted after one rank finished "
            "execution, and no exception is here. A rank that ran out of data first (an "
            "uneven split, `drop_last=False`) or stopped early on its own decision is the "
            "usual reason; a crash whose output is missing is the other."
        ),
        confidence=0.5,
        evidence=[item.id for item, _ in shut][:4],
        fix=(
            "Give every rank the same number of steps (a sampler that splits evenly with "
            "drop_last, or agree on the step count with an allreduce(MIN)); broadcast "
            "early-stopping decisions so all ranks stop together. If a rank crashed, its "
            "output before Horovod's first shutdown message holds the cause."
        ),
        confirm="the ranks' batch counts differ, or one rank left the loop first",
    )


def _finished(evidence: EvidenceSet, view: HangLog, hung: set[int]) -> list[_Death]:
    """Ranks whose process reached Python's exit (torch's warning that
    destroy_process_group() was not called, printed as the process group is torn down at
    exit) with no error of their own, while other ranks still wait: they left the others
    behind. A rank that raised is read from its traceback instead."""
    how = (
        "reached the end of the program and exited (`destroy_process_group() was not called"
        " before program exit`)"
    )
    return [
        _Death(sig.rank, None, how, 0.55 if view.waiting else 0.5, item.id, finished=True)
        for item, sig in signals(evidence, "hang.exit_without_destroy")
        if sig.rank is not None and sig.rank not in hung and sig.rank not in view.own_errors
    ]


def _vanished(view: HangLog, closed: set[int]) -> list[_Death]:
    """Ranks whose own log ends with no error while every other rank that logged reports a
    closed connection and none timed out: the quiet ones' processes are gone (os._exit, a
    kill signal such as the OOM killer's SIGKILL, a crash below Python)."""
    quiet = [r for r in view.silent() if r not in closed]
    if not closed or view.waiting or not quiet or set(view.rank_logs) - set(quiet) - closed:
        return []
    how = (
        "logged no error of its own and its connections closed: its process is gone "
        "(os._exit, a kill signal such as the host OOM killer's SIGKILL, a crash below Python)"
    )
    return [_Death(r, None, how, 0.6, view.rank_logs[r][0].id) for r in quiet]


def _deaths(view: HangLog) -> list[_Death]:
    out: list[_Death] = []
    named_by_rank = any(s.signature == "elastic.child_failed" for _, s in view.launcher)
    for item, sig in view.launcher:
        f = sig.fields
        code = f.get("exitcode")
        if sig.signature == "elastic.child_failed" and sig.rank is not None:
            if sig.rank in view.waiting or sig.rank in view.stopped:
                continue
            signal = f" ({f['signal']})" if f.get("signal") else ""
            confidence = _exit_confidence(view, sig.rank, code)
            if f.get("first") and confidence >= 0.5:
                confidence += 0.05
            if sig.rank in view.barrier_missing:
                confidence = max(confidence, 0.9)
            how = f"exited with code {code}{signal}"
            out.append(_Death(sig.rank, f.get("local_rank"), how, confidence, item.id))
        elif sig.signature == "elastic.worker_failed" and not named_by_rank:
            if isinstance(code, int) and code in _TEARDOWN:
                continue
            how = f"exited with code {code}"
            out.append(_Death(None, f.get("local_rank"), how, 0.5, item.id))
    for rank, (item, record) in view.own_errors.items():
        if rank in view.waiting:
            continue
        where = (
            f" at {record.user_frame.file}:{record.user_frame.line}" if record.user_frame else ""
        )
        message = f": {record.message[:160]}" if record.message else ""
        how = f"raised {record.exception}{message}{where}"
        out.append(_Death(rank, record.local_rank, how, 0.55, item.id))
    return out


def _exit_confidence(view: HangLog, rank: int, code: object) -> float:
    """How surely an exit made the others wait: a kill signal is never the watchdog's doing;
    an exit code of a rank whose log is missing may be a timeout the log would have shown."""
    if not isinstance(code, int) or code in _TEARDOWN:
        return 0.3
    if code < 0 or rank in view.own_errors:
        return 0.85
    return 0.7 if rank in view.present else 0.45
