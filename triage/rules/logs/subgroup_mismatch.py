"""hang.subgroup_mismatch from logs: some ranks' timeouts stand in a group's creation that
others never called."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._hang_lines import hang_log
from triage.rules.stacks._hang_view import creation_split
from triage.text import capitalized, rank_label


@rule("logs.subgroup_mismatch", "hang.subgroup_mismatch")
def subgroup_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """The tracebacks of a hang put some ranks in a group's creation, the others elsewhere.

    What it detects:
    Timed-out tracebacks (a store wait's `DistStoreError: wait timeout`, a collective's
    timeout) where some ranks stand in new_group / new_subgroups / init_device_mesh /
    split_group and the others in another call: the members waited for ranks that never
    called it.

    Why it happens:
    `dist.new_group(ranks)` must be called by every rank of the world, in the same order,
    even by ranks not in `ranks`; a group created lazily on a path only some ranks take
    (a loss term some shards have, an `if rank in ranks:`) hangs the ones that did.

    Evidence:
    Each rank's timed-out traceback: the group-setup frame on the waiting ranks, the other
    call on the rest.

    Fix:
    Create every group up front, on every rank, in the same order; pass
    `use_local_synchronization=True` only when non-members really never call it.

    Known false positives:
    Ranks waiting in init_process_group for a rank that died are hang.rank_exited (the
    world's own set-up is left out here).

    References:
    torch.distributed.new_group documentation.
    """
    traced = hang_log(evidence).traced
    split = creation_split(traced.groups) if traced is not None else None
    if split is None:
        return
    waiting, others = split
    skipped = sorted(r for g in others for r in g.ranks)
    elsewhere = others[0]
    yield Finding(
        title=f"{rank_label(skipped)} never called the {waiting.first.op} the others time out in",
        summary=(
            f"The timed-out tracebacks put {waiting.label} in {waiting.where()}, which every rank"
            f" must call, and {rank_label(skipped)} in {elsewhere.where()}: the group's"
            f" members waited for {'a rank' if len(skipped) == 1 else 'ranks'} that never"
            " called it."
        ),
        ranks=skipped,
        location=waiting.location,
        other_locations=[g.location for g in others if g.location],
        confidence=0.8,
        evidence=waiting.evidence[:3] + [e for g in others for e in g.evidence[:2]],
        fix=(
            f"Call {waiting.first.op} at {waiting.location} on every rank, in the same order,"
            " even on ranks that are not members of the new group: create groups up front,"
            " not lazily on a path only some ranks take."
        ),
        confirm=f"{capitalized(rank_label(skipped))}'s code path never reaches {waiting.where()}",
    )
