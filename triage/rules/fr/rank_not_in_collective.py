"""hang.rank_not_in_collective from Flight Recorder: members that never reached the collective."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import (
    coverage,
    is_subgroup,
    location,
    majority,
    ranks_of,
    stuck_groups,
    where,
)
from triage.text import plural, rank_label, rank_subject


@rule("fr.rank_not_in_collective", "hang.rank_not_in_collective")
def fr_rank_not_in_collective(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: some members never enqueued, or never ran, the collective their group waits in.

    What it detects:
    The oldest unfinished collective of a group spanning all ranks: the culprits' dumps
    end one or more collectives earlier, with nothing unfinished (they are computing,
    loading data, writing a checkpoint, or stuck in a lock). Also members that enqueued
    the collective but are behind the group in it: not finished where the others
    finished, or, on NCCL, not started by their GPU ('scheduled' while the others are
    'started'): their stream is busy with something before it.

    Why it happens:
    Rank-dependent work before a collective (rank 0 evaluates or saves while the others
    go on), a data loader that stalls on some ranks, a deadlock inside user code, a
    kernel that never finishes on one GPU.

    Evidence:
    Flight Recorder dumps: each member's last enqueued collective sequence number and
    the state of its entries; the culprit's own last recorded op and its user line.

    Fix:
    Find what the culprit does after its last recorded collective (its stack: `triage
    hang --pids`, or py-spy dump); move rank-dependent work out of the training step, or
    make every rank wait for it at the same collective.

    Known false positives:
    A rank whose dump was taken long before the others' (dumps are per rank, not
    simultaneous) can look behind; the dump times tell. Ranks outside every recorded
    collective may wait in what the recorder does not record (new_group, a store barrier):
    when they are most of the group the finding is weak (0.45), when half of it (one rank
    of two) a tie (0.6), and it says the waiting side may be the odd one.

    References:
    PyTorch Flight Recorder tutorial ("Not all ranks joining collective").
    """
    for item, point in stuck_groups(evidence):
        if is_subgroup(point):
            continue  # hang.subgroup_mismatch speaks for subgroups
        normal = majority(point)
        idle = [s for s in point.sides if s.state == "idle"]
        lagging = [s for s in point.sides if s.state in ("lagging", "behind")]
        waiting = normal.describe() if normal else "the other members wait in it"
        if idle:
            ranks = ranks_of(idle)
            first = idle[0]
            last = f"{first.op.text}{where(first)}" if first.op else "nothing recorded"
            all_wait = normal is not None and not any(
                s.state in ("other_op", "other_shape", "elsewhere") for s in point.sides
            )
            # Most of the group outside every recorded collective is not a few slow ranks:
            # they likely wait in what the recorder does not record (new_group, a store
            # barrier, gloo's send/recv), and the lone waiter may be the odd one.
            # Half of it (one rank of two) is no majority either way: the waiter may have
            # skipped what the other waits in, so it is weighed as a tie.
            crowd = len(ranks) * 2 > point.members
            half = len(ranks) * 2 == point.members
            unrecorded = (
                f" {'Most' if crowd else 'Half'} of the group stands outside every recorded"
                " collective: they may wait in something the recorder does not record"
                " (process-group creation, a store barrier, gloo's send/recv), and the waiting"
                f" {'rank' if crowd else 'side'} may be the odd one."
                if crowd or half
                else ""
            )
            yield Finding(
                title=f"{rank_label(ranks)} never reached collective seq {point.seq} "
                f"of group {point.group}",
                summary=f"Flight Recorder, group {point.group} ({plural(point.members, 'rank')}), stuck at "
                f"collective seq {point.seq}: {waiting}; "
                + "; ".join(s.describe() for s in idle)
                + "."
                + unrecorded,
                ranks=ranks,
                location=location(first),
                other_locations=[loc for loc in [location(normal)] if loc],
                confidence=round(
                    (0.45 if crowd else 0.6 if half else 0.85 if all_wait else 0.7)
                    * coverage(point),
                    3,
                ),
                evidence=[item.id, *(point.side_evidence_id(s) for s in idle)][:6],
                fix=f"Find what {rank_subject(ranks, 'do')} after {last} (dump its stack: "
                "`triage hang --pids` or py-spy dump); make every rank reach the collective"
                f"{where(normal)}.",
                confirm=f"{rank_label(ranks)}'s stack is outside any collective "
                "(compute, data loading, I/O, a lock)",
            )
        if lagging:
            ranks = ranks_of(lagging)
            behind = lagging[0].state == "behind"
            yield Finding(
                title=(
                    f"{rank_subject(ranks, 'are')} behind in"
                    if behind
                    else f"{rank_label(ranks)}'s GPU never started"
                )
                + f" collective seq {point.seq} of group {point.group}",
                summary=f"Flight Recorder, group {point.group} ({plural(point.members, 'rank')}), stuck at "
                f"collective seq {point.seq}: {waiting}; "
                + "; ".join(s.describe() for s in lagging)
                + ": its stream or host is stuck on earlier work.",
                ranks=ranks,
                location=location(lagging[0]),
                confidence=round(0.6 * coverage(point), 3),
                evidence=[item.id, *(point.side_evidence_id(s) for s in lagging)][:6],
                fix=f"Look at {rank_label(ranks)}'s GPU: a kernel that never finishes, "
                "a GPU fault (dmesg Xid), or a wait on another stream before the collective.",
                confirm=f"{rank_label(ranks)}'s GPU is busy (nvidia-smi) or its "
                "host logged an Xid error",
            )
