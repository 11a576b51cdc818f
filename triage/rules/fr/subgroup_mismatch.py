"""hang.subgroup_mismatch from Flight Recorder: a subgroup collective some members never enter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import (
    coverage,
    is_subgroup,
    left_out_by,
    location,
    majority,
    ranks_of,
    stuck_groups,
    where,
)
from triage.text import rank_label, rank_subject

_ABSENT = ("no_group", "elsewhere", "idle")


@rule("fr.subgroup_mismatch", "hang.subgroup_mismatch")
def fr_subgroup_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: members of a subgroup never enter its collective, or never created the group.

    What it detects:
    A process group smaller than the world whose oldest unfinished collective some
    members never enqueued: they wait in another group's collective instead (often the
    one the waiting members will call next, so both sides wait forever), wait in
    nothing, or list no such group at all (NCCL dumps name every group a rank created).

    Why it happens:
    A collective on a subgroup called under a condition that not every member meets (an
    auxiliary loss only on ranks that have labels), or `new_group` called only on some
    ranks; every member must enter every collective of its groups, in the same order.

    Evidence:
    Flight Recorder dumps: the group's members (pg_config; on gloo, the ranks that used
    it), each member's last sequence number on it, and where the absent members wait.

    Fix:
    Make every member of the group call its collectives, or build the group only from
    ranks that always do; call new_group on every rank in the same order. When the waiting
    members' call sits under a rank-dependent `if` inside the loop (`if not (rank == bad
    and step == 3):`), the finding points at that call and its `if`: where the members
    split.

    Known false positives:
    On gloo, group membership is only known from the ranks that used the group: a member
    that never used it is not seen.

    References:
    torch.distributed.new_group documentation.
    """
    for item, point in stuck_groups(evidence):
        if not is_subgroup(point):
            continue
        absent = [s for s in point.sides if s.state in _ABSENT]
        if not absent:
            continue
        normal = majority(point)
        ranks = ranks_of(absent)
        first = absent[0]
        states = {s.state for s in absent}
        confidence = 0.85 if states <= {"no_group", "elsewhere"} else 0.75
        if point.membership == "observed":
            confidence *= 0.9
        sides = "; ".join(s.describe() for s in (normal, *absent) if s)
        at, elsewhere = location(first), location(normal)
        fix = (
            f"Make every member of group {point.group} enter its collective{where(normal)} (or"
            f" leave {rank_label(ranks)} out of the group); call new_group on every rank in the"
            " same order."
        )
        skipped = left_out_by(normal)
        if skipped is not None:  # where the members split: the call its `if` lets some skip
            block, at = skipped
            elsewhere = location(first)
            fix = (
                f"The group's call at line {at.line} runs only under `{block.text}`"
                f" ({Path(at.file).name}:{block.start}), which left {rank_label(ranks)} out of"
                f" it once: run the collective on every member of group {point.group}, or make"
                " the test the same on all of them."
            )
        yield Finding(
            title=f"{rank_label(ranks)} never entered group {point.group}'s collective "
            f"seq {point.seq}",
            summary=f"Flight Recorder, group {point.group} ({point.members} of {point.world} "
            f"ranks), stuck at collective seq {point.seq}: {sides}.",
            ranks=ranks,
            location=at,
            other_locations=[loc for loc in [elsewhere] if loc],
            confidence=round(confidence * coverage(point), 3),
            evidence=[item.id, *(point.side_evidence_id(s) for s in absent)][:6],
            fix=fix,
            confirm=f"{rank_subject(ranks, 'are')} in group {point.group}, and "
            + ("its stack is" if len(ranks) == 1 else "their stacks are")
            + " in another collective or in new_group",
        )
