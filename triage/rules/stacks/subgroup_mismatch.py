"""hang.subgroup_mismatch from stacks: group setup or a subgroup op that not all enter."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import coverage_factor, creation_split, hang_view
from triage.text import capitalized, rank_label


@rule("stacks.subgroup_mismatch", "hang.subgroup_mismatch")
def subgroup_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Some ranks create a process group that others never join.

    What it detects:
    Ranks blocked in new_group / new_subgroups / init_device_mesh / split_group while
    other ranks are elsewhere.

    Why it happens:
    `dist.new_group(ranks)` must be called by every rank of the world, in the same order,
    even by ranks not in `ranks`; calling it only inside `if rank in ranks:` hangs. A
    collective on a subgroup hangs when a member skips it.

    Evidence:
    py-spy stacks: the group-setup frame in torch/distributed on some ranks only.
    (A collective on a subgroup that a member skips needs the group's membership, which
    Flight Recorder dumps carry and stacks do not.)

    Fix:
    Call new_group (and DeviceMesh construction) on all ranks in the same order, and pass
    `use_local_synchronization=True` only when non-members really never call it; make
    every member of a subgroup enter its collectives.

    Known false positives:
    Ranks waiting in init_process_group for a rank that died are hang.rank_exited.

    References:
    torch.distributed.new_group documentation.
    """
    view = hang_view(evidence)
    split = creation_split(view.groups)
    if split is not None:
        waiting, others = split
        skipped = sorted(r for g in others for r in g.ranks)
        elsewhere = min(others, key=lambda g: len(g.states))
        members = waiting.first.group_ranks
        absent_members = sorted(set(skipped) & set(members)) if members else []
        culprits = absent_members or skipped
        who = (
            f" {rank_label(absent_members).capitalize()} {'is a member' if len(absent_members) == 1 else 'are members'}"
            f" of the new group {members} and never called it."
            if absent_members
            else ""
        )
        yield Finding(
            title=f"{rank_label(culprits)} never called the {waiting.first.op} "
            f"{'its' if len(culprits) == 1 else 'their'} group waits in",
            summary=(
                f"{capitalized(waiting.label)} {waiting.verb('wait')} in {waiting.where()}, which every rank must call; "
                f"{rank_label(skipped)} went on to {elsewhere.where()}.{who}"
            ),
            ranks=culprits,
            location=waiting.location,
            other_locations=[g.location for g in others if g.location],
            confidence=round(0.85 * coverage_factor(view), 3),
            evidence=waiting.evidence[:3] + [e for g in others for e in g.evidence[:2]],
            fix=(
                f"Call {waiting.first.op} at {waiting.location} on every rank, in the same order, "
                "even on ranks that are not members of the new group."
            ),
        )
        return
