"""hang.unknown from stacks: every rank inspected waits in the same place."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import UnseenRanks
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import coverage_factor, hang_view
from triage.text import agree, plural, rank_label


@rule("stacks.no_culprit_visible", "hang.unknown")
def no_culprit_visible(evidence: EvidenceSet) -> Iterator[Finding]:
    """Every live rank waits in the same collective at the same line.

    What it detects:
    All ranks whose stacks were read block in one op from one call site, and no rank is
    missing on this host. When the ranks found say the job is larger than this host
    (process discovery's `unseen_ranks`), the ranks on other hosts were not inspected and
    the finding says the culprit is likely among them, with the command that reaches them.

    Why it happens:
    The stall is below Python: a network or NCCL transport problem, a GPU that stopped
    (Xid), a rank on another host, or a rank whose stack could not be read. On NCCL,
    ranks also pass the collective call and block later at the next synchronisation.

    Evidence:
    py-spy stacks identical across ranks; the ranks WORLD_SIZE names on other hosts.

    Fix:
    Look below Python: Flight Recorder dumps of all ranks (which collective each rank
    completed), NCCL_DEBUG=INFO logs, the hosts not inspected here (`triage hang
    --slurm-job`, `--debug-server`, or `triage collect` on every node and `--collections`).

    Known false positives:
    None: this is the honest 'no culprit in Python' answer. With ranks on other hosts the
    stall may still be below Python; reading those ranks tells.

    References:
    Flight Recorder (TORCH_FR_BUFFER_SIZE); NCCL_DEBUG.
    """
    view = hang_view(evidence)
    unseen = evidence.payloads(UnseenRanks)
    if (
        len(view.groups) != 1
        or view.missing
        or not view.groups[0].waits
        or len(view.groups[0].states) < (1 if unseen else 2)
    ):
        return
    group = view.groups[0]
    unread = (
        f" {plural(view.unreadable, 'rank')} could not be read and may be the culprit."
        if view.unreadable
        else ""
    )
    if unseen:
        item, elsewhere = unseen[0]
        others = rank_label(elsewhere.ranks)
        yield Finding(
            title=f"no culprit on this host: {others} on other hosts "
            f"{agree(len(elsewhere.ranks), 'were')} not inspected",
            summary=(
                f"Every rank inspected on {elsewhere.host} ({group.label}) waits in "
                f"{group.where()}; {others} {agree(len(elsewhere.ranks), 'run')} on other hosts and "
                f"{agree(len(elsewhere.ranks), 'were')} not inspected "
                f"({elsewhere.why}): the rank they wait for is likely among them.{unread}"
            ),
            ranks=[],
            location=group.location,
            confidence=round(0.5 * coverage_factor(view), 3),
            evidence=[item.id, *group.evidence[:4]],
            fix=(
                f"Inspect the whole job: {elsewhere.reach}. The rank that is not in "
                f"{group.first.describe()} is the culprit; if every rank is, the stall is "
                "below Python (Flight Recorder, NCCL_DEBUG=INFO)."
            ),
        )
        return
    yield Finding(
        title="every rank waits in the same collective",
        summary=f"All {len(group.states)} inspected ranks wait in {group.where()}; Python shows no culprit.{unread}",
        ranks=[],
        location=group.location,
        confidence=0.3,
        evidence=group.evidence[:4],
        fix="Look below Python: Flight Recorder dumps, NCCL_DEBUG=INFO logs, and ranks on hosts not inspected.",
    )
