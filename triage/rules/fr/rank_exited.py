"""hang.rank_exited from Flight Recorder: the group waits on ranks that left no dump."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import FRP2PWait
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import majority, stuck_groups
from triage.text import plural, rank_label, rank_subject


@rule("fr.rank_exited", "hang.rank_exited")
def fr_rank_exited(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: the ranks a group waits for left no dump.

    What it detects:
    A group's oldest unfinished collective, or a send/recv, waits on ranks for which no
    dump file exists while every member that did dump is accounted for.

    Why it happens:
    On NCCL every live rank writes its dump when a peer's watchdog times out; a rank that
    crashed, was OOM-killed or returned early writes none. A dump can also be missing
    because it was written on another host and not collected, so this is a lead, not a
    proof.

    Evidence:
    Flight Recorder dumps: group membership from the dumps that exist, and no file for the
    culprit ranks.

    Fix:
    Read the missing rank's own log or the launcher's exit report (`triage analyze LOG`)
    for its traceback, exit code or signal; collect its dump if it exists elsewhere.

    Known false positives:
    Dumps not copied from every host; a rank whose dump file was lost.

    References:
    TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_NCCL_DEBUG_INFO_TEMP_FILE.
    """
    for item, point in stuck_groups(evidence):
        gone = [s for s in point.sides if s.state == "no_dump"]
        if not gone:
            continue
        ranks = sorted(r for s in gone for r in s.ranks)
        normal = majority(point)
        other = any(
            s.state in ("other_op", "other_shape", "idle", "lagging", "elsewhere", "no_group")
            for s in point.sides
        )
        waiting = normal.describe() if normal else "the dumped members wait"
        yield Finding(
            title=f"{rank_label(ranks)} left no Flight Recorder dump while "
            f"{'its' if len(ranks) == 1 else 'their'} group waits",
            summary=f"Flight Recorder, group {point.group} ({plural(point.members, 'rank')}), stuck at "
            f"collective seq {point.seq}: {waiting}; {rank_label(ranks)} left no dump: "
            "it exited, crashed, or its dump was not collected.",
            ranks=ranks,
            location=normal.op.location if normal and normal.op else None,
            confidence=0.35 if other else 0.55,
            evidence=[item.id, *(point.side_evidence_id(s) for s in gone)][:6],
            fix=f"Read {rank_label(ranks)}'s own log or the launcher's exit report for "
            "its traceback, exit code or signal; -9/SIGKILL usually means the host OOM killer.",
            confirm=f"{rank_subject(ranks, 'have')} no live process (the launcher reports its "
            "exit) rather than a dump left on another host",
        )
    for item, wait in evidence.payloads(FRP2PWait):
        if wait.sink is None or wait.sink_state != "no_dump":
            continue
        yield Finding(
            title=f"rank {wait.sink} left no dump while ranks wait to exchange with it",
            summary=f"Flight Recorder: {rank_subject(wait.ranks, 'wait')} in send/recv with "
            f"rank {wait.sink}, which left no dump.",
            ranks=[wait.sink],
            confidence=0.5,
            evidence=[item.id],
            fix=f"Read rank {wait.sink}'s own log or the launcher's exit report.",
            confirm=f"rank {wait.sink} has no live process",
        )
