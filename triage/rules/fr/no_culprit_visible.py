"""hang.unknown from Flight Recorder: every member entered the same collective."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import agreeing, coverage, stuck_groups
from triage.text import plural


@rule("fr.no_culprit_visible", "hang.unknown")
def fr_no_culprit_visible(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: every member of the stuck group entered the same collective, none finished.

    What it detects:
    A group's oldest unfinished collective is the same op, sizes and dtypes on every
    member that dumped, in the same state; no member is behind or elsewhere.

    Why it happens:
    The stall is below the collective calls: the network or the NCCL transport, a GPU
    that stopped (Xid), GPU work queued ahead of the collective on a rank's stream that never
    finishes (a kernel spinning or waiting on another GPU), or a member whose dump is missing
    or unreadable.

    Evidence:
    Flight Recorder dumps that agree on the stuck op.

    Fix:
    Look below Python: NCCL_DEBUG=INFO logs of every rank, the hosts' kernel logs (Xid,
    link down), and the dumps that are missing.

    Known false positives:
    None: this is the honest 'the dumps show no culprit' answer.

    References:
    NCCL_DEBUG; Flight Recorder.
    """
    for item, point in stuck_groups(evidence):
        normal = agreeing(point)
        if normal is None:
            continue
        yield Finding(
            title=f"every member of group {point.group} waits in the same collective",
            summary=f"Flight Recorder, group {point.group} ({plural(point.members, 'rank')}): "
            f"{normal.describe()}, and none finished it; the dumps show no culprit.",
            ranks=[],
            location=normal.op.location if normal.op else None,
            confidence=round(0.3 * coverage(point), 3),
            evidence=[item.id],
            fix="Look below Python: NCCL_DEBUG=INFO logs of every rank, kernel logs for GPU "
            "(Xid) or network errors, the GPUs' utilisation (a kernel ahead of the collective "
            "that never ends keeps one at 100%), and any dumps that are missing.",
        )
