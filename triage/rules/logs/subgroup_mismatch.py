"""hang.subgroup_mismatch from logs: some ranks' timeouts stand in a group's creation that
others never called."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._hang_lines import hang_log
from triage.rules.logs._signals import ids, ranks_of, signals
from triage.rules.stacks._hang_view import creation_split
from triage.text import capitalized, rank_label


@rule("logs.subgroup_mismatch", "hang.subgroup_mismatch")
def subgroup_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """The tracebacks of a hang put some ranks in a group's creation, the others elsewhere.

    What it detects:
    Timed-out tracebacks (a store wait's `DistStoreError: wait timeout`, a collective's
    timeout) where some ranks stand in new_group / new_subgroups / init_device_mesh /
    split_group and the others in another call: the members waited for ranks that never
    called it. Weaker (0.45), torch's store-based barrier of a later group
    (`store_based_barrier_key:2` and up; 1 is the world's) counting fewer ranks than the
    world: new_group was called by some ranks only, or the others are still elsewhere.

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
    yield from _later_group_barrier(evidence)
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


def _later_group_barrier(evidence: EvidenceSet) -> Iterator[Finding]:
    """new_group's store-based barrier (torch 1.x-2.1) short of the world: the key numbers
    the groups made, so key 2 and up is a group after the world's."""
    short = [
        (e, s)
        for e, s in signals(evidence, "setup.store_barrier")
        if s.fields.get("group", 1) > 1 and not s.fields.get("excess")
    ]
    if not short:
        return
    fields = short[0][1].fields
    yield Finding(
        title=f"only {fields['joined']} of {fields['world_size']} ranks reached a new process"
        " group's barrier",
        summary=f"`{short[0][1].text.strip()[:200]}`: the barrier of process group"
        f" {fields['group']} (a new_group after the world's) counted {fields['joined']} of"
        f" {fields['world_size']} ranks. Every rank must call new_group, members or not: the"
        " others never called it, or are still busy elsewhere (a download, logging set-up on"
        " rank 0).",
        ranks=ranks_of(s for _, s in short),
        confidence=0.45,
        evidence=ids(short)[:12],
        fix="Create every group up front, on every rank, in the same order (new_group,"
        " new_subgroups, init_device_mesh); keep rank-0-only work (downloads, logger set-up)"
        " out of the way before it, or behind a barrier all ranks reach.",
        confirm="py-spy dump of a rank missing from the count: it is not in new_group",
    )
