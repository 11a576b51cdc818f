"""hang.p2p_deadlock from logs: every rank waits in a send (or every one in a receive), or
NCCL's per-op lines stop on point-to-point ops."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.observations import LogFile, LogSignal
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import PEER_TEXT, TIMEOUT_TEXT
from triage.rules.logs._hang_lines import hang_log
from triage.rules.logs._signals import Signal, signals, tracebacks
from triage.text import rank_label, rank_subject

#: How close to its log's end a writer's last op must be for the log to have stopped there.
_AT_END = 20
_P2P = frozenset({"Send", "Recv"})


@rule("logs.p2p_deadlock", "hang.p2p_deadlock")
def p2p_deadlock(evidence: EvidenceSet) -> Iterator[Finding]:
    """Every rank waits in a point-to-point op, the same way round.

    What it detects:
    Timeouts of every waiting rank in a point-to-point op, all receives or all sends: gloo's
    `Timed out waiting Nms for recv operation` in a traceback through `dist.recv` (or
    irecv, send, isend; a rank whose call there ended in a closed connection instead,
    its peer having timed out and left first, counts too), the watchdog's
    `WorkNCCL(... OpType=RECV ...)`, with no rank waiting in a collective (0.6, at the
    user's p2p line). Else:
    NCCL's per-op INFO lines (`NCCL INFO Send: opCount 4 ... root 1 comm ...`), as
    NCCL_DEBUG=INFO with the COLL subsystem writes them: the last op each writer (a
    rank's log, a `host:pid` prefix, a device) enqueued is a point-to-point Send or Recv,
    and its log ends within a few lines of it. Stronger (0.45) when two or more writers
    all stopped on the same direction (every one sends, none receives).

    Why it happens:
    A send may block until the peer posts the matching receive (large messages, and NCCL
    connects p2p channels lazily, on the first exchange). Two ranks that both send first,
    sends and receives of one pair split over concurrent streams or communicators, or a
    pipeline schedule whose stages disagree on the order, leave each side waiting on the
    other.

    Evidence:
    Each rank's timeout and the p2p frame of its traceback; or the last hang.nccl_coll
    line of each writer, and where its log stops.

    Fix:
    Pair every send with its receive in one order all ranks agree on: post them together
    with `dist.batch_isend_irecv`, or let even ranks send first and odd ranks receive
    first; keep one pair's traffic on one communicator and stream.

    Known false positives:
    A log cut short while a pipeline-parallel job was healthy also ends on p2p ops (most of
    its ops are sends and receives); a rank that is slow or gone leaves its peer waiting in
    a receive the same way. Stacks or Flight Recorder dumps of both sides tell them apart.

    References:
    https://pytorch.org/docs/stable/distributed.html#torch.distributed.batch_isend_irecv
    """
    waits = _p2p_timeouts(evidence)
    if waits:
        yield waits
        return
    last = _last_ops(evidence)
    if not last or any(s.fields.get("coll") not in _P2P for _, s in last):
        return
    ends = {log.path: log.lines for _, log in evidence.payloads(LogFile)}
    if any(ends.get(s.path, s.line) - s.line > _AT_END for _, s in last):
        return
    directions = {s.fields["coll"] for _, s in last}
    facing = len(last) >= 2 and len(directions) == 1
    ranks = sorted({s.rank for _, s in last if s.rank is not None})
    who = f" ({rank_label(ranks)})" if ranks else ""
    ops = "; ".join(f"`{s.text[:120]}`" for _, s in last[:3])
    yield Finding(
        title=f"NCCL's log stops on point-to-point ops{who}",
        summary=(
            f"The last op {'every writer' if len(last) > 1 else 'the log'} enqueued is a"
            f" {' and '.join(sorted(directions))} and nothing follows ({ops})"
            + (
                f": all of them {next(iter(directions)).lower()} and none "
                f"{'receives' if directions == {'Send'} else 'sends'}, so each waits on a"
                " peer that waits too."
                if facing
                else ": a send waits for its peer's matching receive (or the reverse)."
            )
        ),
        ranks=ranks,
        confidence=0.45 if facing else 0.3,
        evidence=[e.id for e, _ in last][:8],
        fix="Pair each send with its receive in one order every rank agrees on: post them"
        " together with dist.batch_isend_irecv, or let even ranks send first and odd ranks"
        " receive first; keep one pair's sends and receives on one communicator and stream.",
        confirm="stacks or Flight Recorder dumps of both peers show each waiting in its send"
        " (or receive) to the other",
    )


def _p2p_timeouts(evidence: EvidenceSet) -> Finding | None:
    """Every rank that timed out did so in a send or every one in a receive: each waits on
    a peer that waits the same way (a ring where all receive first)."""
    view = hang_log(evidence)
    ops: dict[int, tuple[str, str]] = {}
    closed: dict[int, tuple[str, str]] = {}
    for item, record in tracebacks(evidence, dumps=False):
        text = f"{record.exception}: {record.message}"
        into = ops if TIMEOUT_TEXT.search(text) else closed if PEER_TEXT.search(text) else None
        if record.rank is None or into is None:
            continue
        call = next((f.function for f in record.frames if _C10D.search(f.file)), None)
        if call in _P2P_CALLS:
            into[record.rank] = (_P2P_CALLS[call], item.id)
    if ops:  # a rank whose peer timed out and left first waited in its own p2p call all the same
        ops |= {rank: found for rank, found in closed.items() if rank not in ops}
    for item, sig in view.timeouts:
        op = str(sig.fields.get("op", "")).upper()
        if sig.rank is not None and op in ("SEND", "RECV"):
            ops.setdefault(sig.rank, ("Send" if op == "SEND" else "Recv", item.id))
    ranks = sorted(ops)
    directions = {direction for direction, _ in ops.values()}
    if len(ranks) < 2 or len(directions) != 1 or set(view.waiting) - set(ranks):
        return None
    direction = next(iter(directions))
    verb = "receive" if direction == "Recv" else "send"
    return Finding(
        title=f"{rank_subject(ranks, 'wait')} in a point-to-point {verb}, every one",
        summary=f"{rank_label(ranks).capitalize()} all waited in a {verb}"
        + (" (timed out there, or lost a peer that had)" if closed else ", and timed out there")
        + f"; no rank waits in a collective: each waits to {verb} {'from' if verb == 'receive' else 'to'} a peer"
        f" that is itself waiting to {verb}, so no message can move (a ring where every rank"
        " receives first, or two peers that both send first).",
        ranks=ranks,
        location=view.location(ranks),
        confidence=0.6,
        evidence=[evidence_id for _, evidence_id in ops.values()][:8],
        fix="Pair each send with its receive in one order every rank agrees on: post them"
        " together with dist.batch_isend_irecv, or let even ranks send first and odd ranks"
        " receive first.",
        confirm="stacks of every rank (`triage hang`) show each one in its own"
        f" {verb} at the same line",
    )


#: torch.distributed's point-to-point calls, by the direction they wait in.
_P2P_CALLS = {"recv": "Recv", "irecv": "Recv", "send": "Send", "isend": "Send"}
_C10D = re.compile(r"distributed_c10d\.py$")


def _last_ops(evidence: EvidenceSet) -> list[Signal]:
    """Each writer's last COLL line: a writer is a file with its rank, host:pid and device."""
    last: dict[tuple[object, ...], tuple[int, Signal]] = {}
    for item, sig in signals(evidence, "hang.nccl_coll"):
        key = _writer(sig)
        if key not in last or sig.line > last[key][0]:
            last[key] = (sig.line, (item, sig))
    return [found for _, found in last.values()]


def _writer(sig: LogSignal) -> tuple[object, ...]:
    return (sig.path, sig.rank, sig.host, sig.pid, sig.device)
