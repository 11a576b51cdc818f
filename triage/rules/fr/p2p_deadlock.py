"""hang.p2p_deadlock from Flight Recorder: sends and recvs that no peer matches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from triage.models import Finding
from triage.observations import FROp, FRP2PWait
from triage.registry import EvidenceSet, rule
from triage.text import rank_label, rank_subject


def _at(op: FROp | None) -> str:
    if op is None or op.location is None:
        return ""
    return f" at {Path(op.location.file).name}:{op.location.line}"


@rule("fr.p2p_deadlock", "hang.p2p_deadlock")
def fr_p2p_deadlock(evidence: EvidenceSet) -> Iterator[Finding]:
    """Flight Recorder: ranks blocked in send/recv that their peer never matches.

    What it detects:
    Each rank's oldest unfinished op is a send or recv whose peer has no matching
    unfinished recv or send: a cycle (both sides send first, or both receive first), or a
    chain ending at a rank that waits in a collective or in nothing.

    Why it happens:
    Blocking send/recv in the same order on both sides of a pair (pipeline stages that
    all send before they receive), a recv from the wrong source, or a peer that skipped
    its side of the exchange.

    Evidence:
    Flight Recorder dumps (NCCL records point-to-point ops; gloo does not): the pending
    send/recv entries, their peers, and what the peer does instead.

    Fix:
    Order the exchange by rank parity (even ranks send first, odd ranks receive first),
    use isend/irecv and wait on both, or `dist.batch_isend_irecv`.

    Known false positives:
    Large NCCL sends block until received; small ones may complete eagerly, so a cycle of
    small sends can be a stall elsewhere.

    References:
    torch.distributed.batch_isend_irecv documentation.
    """
    for item, wait in evidence.payloads(FRP2PWait):
        if wait.sink_state == "no_dump":
            continue  # hang.rank_exited speaks for a peer that left no dump
        ranks = wait.culprits
        first = wait.ops.get(ranks[0]) if ranks else None
        if wait.cycle:
            kinds = {op.op for r, op in wait.ops.items() if r in ranks}
            order = {"send"}, {"recv"}
            what = (
                "all send first"
                if kinds == order[0]
                else "all receive first"
                if kinds == order[1]
                else "in an order that never meets"
            )
            summary = (
                f"Flight Recorder: {rank_subject(ranks, 'wait')} on each other in send/recv ({what}): "
                + "; ".join(
                    f"rank {r} in {op.text}{_at(op)}"
                    for r, op in sorted(wait.ops.items())
                    if r in ranks
                )
            )
            confidence = 0.85
        else:
            doing = {"idle": "waits in no collective", "collective": "waits in a collective"}.get(
                wait.sink_state, "is blocked elsewhere"
            )
            summary = (
                f"Flight Recorder: {rank_subject(wait.ranks, 'wait')} in send/recv with rank "
                f"{wait.sink}, which posted no matching op and {doing}"
                + (f" ({first.text}{_at(first)})" if first else "")
                + "."
            )
            confidence = 0.7
        yield Finding(
            title=f"send/recv of {rank_label(sorted({*wait.ranks, *ranks}))} never match",
            summary=summary,
            ranks=ranks,
            location=first.location if first else None,
            other_locations=[
                op.location for op in wait.ops.values() if op.location and op is not first
            ][:3],
            confidence=confidence,
            evidence=[item.id],
            fix="Order the exchange so every send meets a recv: even ranks send first and odd "
            "ranks receive first, or use isend/irecv (batch_isend_irecv) and wait on both.",
            confirm=f"{rank_label(ranks)}'s stacks are in send/recv",
        )
