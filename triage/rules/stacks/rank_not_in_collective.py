"""hang.rank_not_in_collective from stacks: the outliers are busy somewhere else."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import RankActivity
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import coverage_factor, hang_view, is_exiting, past_the_loop
from triage.text import capitalized, rank_label, rank_subject

_ADVICE = {
    RankActivity.compute: "a long or endless computation",
    RankActivity.data_loading: "data loading (a stuck or slow DataLoader worker)",
    RankActivity.io: "I/O (checkpointing, logging, a network filesystem)",
    RankActivity.idle: "a blocking call outside torch.distributed (sleep, input, socket, subprocess)",
    RankActivity.lock: "a lock, queue or thread join",
    RankActivity.gil_held: "a thread that holds the GIL and never lets it go (a C or "
    "extension call that does not release it), so its main thread cannot run; the call is",
    RankActivity.debugger: "a debugger breakpoint",
    RankActivity.stopped: "a stopped state (SIGSTOP or SIGTSTP: `kill -STOP`, job control, a "
    "debugger): it runs nothing until SIGCONT",
    RankActivity.unknown: "code py-spy could not attribute",
}


@rule("stacks.rank_not_in_collective", "hang.rank_not_in_collective")
def rank_not_in_collective(evidence: EvidenceSet) -> Iterator[Finding]:
    """Most ranks wait in a collective while some are busy outside any collective.

    What it detects:
    Ranks whose main thread is not in any torch.distributed op (compute, data loading,
    I/O, a lock, a debugger, a blocking call) while the others wait in a collective.

    Why it happens:
    Rank-dependent work before a collective: evaluation or logging only on rank 0, a
    slow or stuck DataLoader on one rank, a checkpoint write to a slow filesystem, a
    `breakpoint()` left in, a deadlock in user threads.

    Evidence:
    py-spy stacks: the majority's innermost torch frame is a collective; the outliers' is
    not, and their user frame shows where they are.

    Fix:
    Make the outlier rank reach the collective: move rank-0-only work after the collective
    or make every rank do it, fix the stuck loader/I/O, or raise the timeout when the
    work is legitimately long (e.g. `init_process_group(timeout=...)`).

    Known false positives:
    A rank that is merely slower (straggler) shows the same picture in one dump; dump
    again a few seconds later: a real hang keeps the same line.

    References:
    torch.distributed docs, "Debugging torch.distributed applications".
    """
    view = hang_view(evidence)
    majority = view.majority
    if majority is None:
        return
    outliers = [
        g
        for g in view.groups
        if not g.waits
        and not is_exiting(g.first)
        and past_the_loop(g.first, majority.first) is not True
    ]
    if not outliers:
        return
    culprit = min(outliers, key=lambda g: len(g.states))
    ranks = sorted(r for g in outliers for r in g.ranks)
    activity = _ADVICE.get(culprit.first.activity, culprit.first.activity.value)
    alone = len(ranks) < sum(len(g.states) for g in view.waiting)
    yield Finding(
        title=f"{rank_subject(ranks, 'are') if ranks else culprit.label + ' is'} not in the collective "
        f"{'its' if len(ranks) <= 1 else 'their'} peers wait in",
        summary=(
            f"{capitalized(majority.label)} {majority.verb('wait')} in {majority.where()}, but "
            f"{culprit.label} {culprit.verb('are')} in {activity} at "
            f"{culprit.location or 'an unknown place'}."
        ),
        ranks=ranks,
        location=culprit.location,
        other_locations=[loc for loc in [majority.location] if loc],
        confidence=round((0.85 if alone else 0.6) * coverage_factor(view), 3),
        evidence=[e for g in outliers for e in g.evidence[:3]] + majority.evidence[:2],
        fix=(
            f"Make {rank_label(ranks) if ranks else culprit.label} reach the collective at {majority.location}: move the "
            f"work at {culprit.location} so every rank does it or it ends before the collective; "
            "if it is legitimately long, raise the process-group timeout."
        ),
    )
