"""hang.rank_not_in_collective from logs: ranks timed out waiting for the root rank's NCCL
unique ID, so the root never reached the group's first collective in time."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids, signals, tracebacks


@rule("logs.unique_id_timeout", "hang.rank_not_in_collective")
def unique_id_timeout(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks timed out waiting for the NCCL unique ID of a root rank that was elsewhere.

    What it detects:
    torch's `[N] is setting up NCCL communicator and retrieving ncclUniqueId from [R] via
    c10d key-value store by key 'K', but store->get('K') got error: ...` (often after `This
    may indicate a possible application crash on rank R or a network set up issue.`): rank
    N reached the group's first collective, and rank R, which creates the communicator's
    ID, did not publish it within the store timeout.

    Why it happens:
    NCCL communicators are created lazily at the first collective. When the root rank does
    something long on its own before it (dataset download or tokenization, checkpoint
    loading, evaluation on rank 0 only), its peers time out in the store; the same happens
    when the root died before it got there.

    Evidence:
    The unique-ID timeout lines, the root rank they name, and whether the root left a
    traceback of its own.

    Fix:
    Do rank-0-only work before init_process_group or make every rank wait for it with a
    barrier whose timeout covers it (init_process_group(timeout=...)); cache the processed
    dataset so later runs skip the work; if the root crashed, its own traceback is the cause.

    Known false positives:
    A network problem between the root and the store (the message says so too); a root that
    crashed, which its own log shows.

    References:
    torch.distributed.init_process_group (timeout); ProcessGroupNCCL's lazy communicator
    creation.
    """
    found = signals(evidence, "hang.unique_id_timeout")
    if not found:
        return
    roots = sorted({int(s.fields["root"]) for _, s in found if "root" in s.fields})
    if len(roots) != 1:
        return
    root = roots[0]
    crashed = [(e, t) for e, t in tracebacks(evidence, dumps=False) if t.rank == root]
    waiting = sorted({s.rank for _, s in found if s.rank is not None and s.rank != root})
    who = f"rank {', '.join(map(str, waiting))}" if waiting else "its peers"
    yield Finding(
        title=f"rank {root} was not at the first collective when {who} reached it",
        summary=f"{who.capitalize()} timed out waiting for rank {root}'s NCCL unique ID"
        f" (`{found[0][1].text[:160]}`): rank {root} was busy elsewhere before the group's"
        " first collective, or it had died.",
        ranks=[root],
        confidence=0.35 if crashed else 0.55,
        evidence=(ids(found) + [e.id for e, _ in crashed])[:8],
        fix=f"Find what rank {root} did before its first collective: move rank-{root}-only"
        " work (dataset preparation, tokenization, checkpoint loading) before"
        " init_process_group, or give every rank a barrier whose timeout covers it"
        " (init_process_group(timeout=...)); if it crashed, its traceback is the cause.",
        confirm=f"rank {root}'s log shows it still working (no traceback) when the others"
        " timed out, rather than a crash",
    )
