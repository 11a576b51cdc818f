"""hang.unknown from stacks: every rank waits in the same place."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import hang_view


@rule("stacks.no_culprit_visible", "hang.unknown")
def no_culprit_visible(evidence: EvidenceSet) -> Iterator[Finding]:
    """Every live rank waits in the same collective at the same line.

    What it detects:
    All ranks whose stacks were read block in one op from one call site, and no rank is
    missing on this host.

    Why it happens:
    The stall is below Python: a network or NCCL transport problem, a GPU that stopped
    (Xid), a rank on another host, or a rank whose stack could not be read. On NCCL,
    ranks also pass the collective call and block later at the next synchronisation.

    Evidence:
    py-spy stacks identical across ranks.

    Fix:
    Look below Python: Flight Recorder dumps of all ranks (which collective each rank
    completed), NCCL_DEBUG=INFO logs, the hosts not inspected here.

    Known false positives:
    None: this is the honest 'no culprit in Python' answer.

    References:
    Flight Recorder (TORCH_FR_BUFFER_SIZE); NCCL_DEBUG.
    """
    view = hang_view(evidence)
    if (
        len(view.groups) != 1
        or view.missing
        or not view.groups[0].waits
        or len(view.groups[0].states) < 2
    ):
        return
    group = view.groups[0]
    unread = (
        f" {view.unreadable} rank(s) could not be read and may be the culprit."
        if view.unreadable
        else ""
    )
    yield Finding(
        title="every rank waits in the same collective",
        summary=f"All {len(group.states)} inspected ranks wait in {group.where()}; Python shows no culprit.{unread}",
        ranks=[],
        location=group.location,
        confidence=0.3,
        evidence=group.evidence[:4],
        fix="Look below Python: Flight Recorder dumps, NCCL_DEBUG=INFO logs, and ranks on hosts not inspected.",
    )
