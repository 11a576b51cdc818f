"""What the log-only hang rules share: where each rank stood, and who differs.

Logs of a hung job say, per rank, which collective it timed out in (watchdog), how far
its process group got (last enqueued / completed work), which collective it entered
(TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints) or enqueued (NCCL COLL opCount). Each
source numbers collectives its own way, so positions are compared only within one
ledger (one source, one process group or communicator size). A split of a ledger is
the minority of ranks that stand elsewhere; it is computed once per evidence set.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from triage.grouping import latest_stacks
from triage.models import Evidence, Location
from triage.observations import LogFile, LogSignal, RankState, TracebackRecord
from triage.readers.logscan import file_origin
from triage.readers.source import rank_condition
from triage.registry import EvidenceSet
from triage.rules.logs._signals import reports_a_stop, signals, tracebacks
from triage.rules.logs._trace_split import TIMEOUTS, TraceSplit, timeout_stacks, trace_split
from triage.text import format_ranks

LAUNCHER = ("elastic.child_failed", "elastic.worker_failed")
_P2P = {"SEND", "RECV", "RECVANYSOURCE", "Send", "Recv"}
_UNEVEN_SPLITS = ("ALLTOALL", "AllToAll")
_NOT_OWN_ERROR = re.compile(
    r"(?i)time[ds]? ?out|watchdog|nccl|gloo|processgroup|c10d|connection|closed by|reset by|"
    r"abort|broken pipe|monitoredbarrier|collective|peer|signal|terminat"
)
_DIST = re.compile(r"(^|/)torch/distributed/")


@dataclass(frozen=True)
class Position:
    """Where one rank stood in one ledger: the collective's number, op and sizes."""

    rank: int
    seq: int | None
    op: str | None
    size: str | None = None
    dtype: str | None = None
    waiting: bool = True
    evidence: str = ""

    def describe(self) -> str:
        if not self.waiting:
            return f"idle after collective #{self.seq}" if self.seq is not None else "idle"
        what = self.op or "a collective"
        number = f" #{self.seq}" if self.seq is not None else ""
        sizes = ", ".join(
            v for v in (f"size {self.size}" if self.size else "", self.dtype or "") if v
        )
        return f"{what}{number}" + (f" ({sizes})" if sizes else "")


@dataclass
class Ledger:
    """Positions from one source on one process group: comparable with each other."""

    source: str
    scope: str
    positions: dict[int, Position] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return {
            "fingerprint": "TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints",
            "watchdog": "watchdog timeouts and progress",
            "opcount": "NCCL opCount traces",
            "opcount_device": "NCCL opCount traces (ranks read as the CUDA device of each"
            " process on one host)",
            "print": "ranks' own prints before their collectives",
        }[self.source]


@dataclass
class Split:
    """The ranks of a ledger that stand apart from the majority."""

    ledger: Ledger
    culprits: list[Position]
    majority: list[Position]
    how: str  # "op", "seq" or "shape"
    decided: bool  # False: a tie the logs could not break; every side is named
    gap: int | None = None
    branch: str = ""

    @property
    def ranks(self) -> list[int]:
        return sorted(p.rank for p in self.culprits)

    @property
    def evidence(self) -> list[str]:
        return [p.evidence for p in self.culprits + self.majority[:3] if p.evidence]

    @property
    def culprits_idle(self) -> bool:
        return all(not p.waiting for p in self.culprits)


@dataclass
class HangLog:
    """Everything the log-only hang rules read, computed once per evidence set."""

    timeouts: list[tuple[Evidence, LogSignal]]
    waiting: dict[int, list[str]]
    barrier_missing: dict[int, list[str]]
    present: set[int]
    #: Ranks the launcher reports only as stopped by its own teardown (SIGTERM, not first).
    stopped: set[int]
    #: Ranks that logged a peer's failure (a connection their peer closed or reset).
    lost_peer: set[int]
    rank_logs: dict[int, tuple[Evidence, LogFile]]
    own_errors: dict[int, tuple[Evidence, TracebackRecord]]
    launcher: list[tuple[Evidence, LogSignal]]
    stacks: list[tuple[Evidence, RankState]]
    dumps: list[tuple[Evidence, TracebackRecord]]
    locations: dict[int, Location]
    splits: list[Split]
    traced: TraceSplit | None

    def location(self, ranks: Iterable[int]) -> Location | None:
        return next((self.locations[r] for r in ranks if r in self.locations), None)

    def one_wait(self) -> bool:
        """Every waiting rank names the same collective: one sequence number, or (gloo's
        timeouts carry none) one line of user code in their tracebacks."""
        seqs = [self._seq(r) for r in self.waiting]
        if seqs and None not in seqs:
            return len(set(seqs)) == 1
        places = [self.locations.get(r) for r in self.waiting]
        return (
            bool(places)
            and len({(p.file, p.line) if p else None for p in places}) == 1
            and (None not in places)
        )

    def silent(self) -> list[int]:
        """Ranks whose own log is here, with no timeout, no exit of their own and no barrier
        report: the ranks their peers waited for, when those all wait in one collective."""
        exits = {s.rank for _, s in self.launcher if s.rank is not None} - self.stopped
        return sorted(set(self.rank_logs) - set(self.waiting) - exits - set(self.own_errors))

    def _seq(self, rank: int) -> object:
        keys = {
            s.fields.get("seq") for _, s in self.timeouts if s.rank == rank and "seq" in s.fields
        }
        return keys.pop() if len(keys) == 1 else None


def unpaired_reports(evidence: EvidenceSet) -> list[tuple[Evidence, LogSignal]]:
    """DETAIL's mismatch errors that name only the reporting rank's own fingerprint."""
    return [
        (e, s) for e, s in signals(evidence, "hang.fingerprint_mismatch") if "peer" not in s.fields
    ]


def same_op_reports(reports: list[tuple[Evidence, LogSignal]]) -> bool:
    """Two or more ranks each call the same op inconsistent: the op is not what differs,
    so their tensors are (shape or dtype)."""
    ranks = {s.fields.get("rank") for _, s in reports}
    ops = {s.fields.get("op") for _, s in reports}
    return len(ranks) >= 2 and len(ops) == 1 and None not in ops


def short_path(path: str) -> str:
    """A log's name as a reader tells it apart: `rank3.log`, or `attempt_0/3/stdout.log`
    for torchelastic's per-rank folders, whose file names repeat."""
    parts = Path(path).parts
    return "/".join(parts[-3:]) if file_origin(path).rank is None else parts[-1]


def hang_log(evidence: EvidenceSet) -> HangLog:
    return evidence.derived("hang_log", lambda: _build(evidence))


def _build(evidence: EvidenceSet) -> HangLog:
    timeouts = signals(evidence, *TIMEOUTS)
    progress = signals(evidence, "hang.watchdog_progress")
    timeouts += [(e, s) for e, s in progress if "seq" in s.fields or s.fields.get("timed_out")]
    waiting: dict[int, list[str]] = defaultdict(list)
    for item, sig in timeouts + signals(evidence, "hang.monitored_barrier_peer"):
        if sig.rank is not None:
            waiting[sig.rank].append(item.id)
    for item, sig in progress:
        # Work still in flight is a wait, whether or not this rank's own timer fired yet.
        if sig.rank is not None and sig.fields["last_enqueued"] > sig.fields["last_completed"]:
            waiting[sig.rank].append(item.id)
        if "timeout_from" in sig.fields:
            waiting[int(sig.fields["timeout_from"])].append(item.id)
    for item, sig in signals(evidence, "hang.fingerprint"):
        if sig.rank is not None and sig.fields.get("stage") == "barrier_error":
            waiting[sig.rank].append(item.id)
    missing: dict[int, list[str]] = defaultdict(list)
    for item, sig in signals(evidence, "hang.monitored_barrier"):
        for rank in sig.fields.get("failed_ranks", []):
            missing[int(rank)].append(item.id)
    launcher = signals(evidence, *LAUNCHER)
    present = {
        e.rank
        for e in evidence.items
        if e.rank is not None
        and e.kind
        in (LogSignal.EVIDENCE_KIND, TracebackRecord.EVIDENCE_KIND, RankState.EVIDENCE_KIND)
    } - {s.rank for _, s in launcher}
    rank_logs = {
        info.rank: (item, info)
        for item, info in evidence.payloads(LogFile)
        if info.rank is not None
    }
    locations = _locations(evidence)
    order = {item.id: index for index, item in enumerate(evidence.items)}
    ledgers = [
        _fingerprints(evidence, order),
        *_watchdog(evidence, progress, order),
        *_opcounts(evidence, order),
        _prints(evidence, order),
    ]
    splits = [
        s
        for ledger in ledgers
        if len(ledger.positions) >= 2 and (s := split(ledger, locations)) is not None
    ]
    return HangLog(
        timeouts=timeouts,
        waiting=dict(waiting),
        barrier_missing=dict(missing),
        present=present | set(rank_logs),
        stopped=_stopped(launcher),
        lost_peer={s.rank for _, s in signals(evidence) if s.peer_symptom and s.rank is not None},
        rank_logs=rank_logs,
        own_errors=_own_errors(evidence),
        launcher=launcher,
        stacks=latest_stacks(evidence),
        dumps=tracebacks(evidence, dumps=True),
        locations=locations,
        splits=splits,
        traced=trace_split(timeout_stacks(evidence)),
    )


def _stopped(launcher: list[tuple[Evidence, LogSignal]]) -> set[int]:
    """Ranks the launcher's teardown stopped: SIGTERM and not the first failure, or SIGKILL
    after another rank failed first (the teardown kills a rank that ignores SIGTERM, being
    stopped or stuck in C; an OOM kill would have been the first failure itself)."""
    reports = [
        s for _, s in launcher if s.signature == "elastic.child_failed" and s.rank is not None
    ]
    someone_first = any(s.fields.get("first") for s in reports)
    return {
        s.rank
        for s in reports
        if s.rank is not None
        and not s.fields.get("first")
        and (
            s.fields.get("signal") == "SIGTERM"
            or (s.fields.get("signal") == "SIGKILL" and someone_first)
        )
    }


def _locations(evidence: EvidenceSet) -> dict[int, Location]:
    """Each rank's user line: the last traceback or dump that passes through torch.distributed
    (the collective call), else its last one with a user frame."""
    best: dict[int, tuple[tuple[int, str, int], Location]] = {}
    for _, record in tracebacks(evidence):
        if record.rank is None or record.user_frame is None:
            continue
        in_dist = any(_DIST.search(f.file) for f in record.frames)
        key = (int(in_dist), record.path, record.line)
        if record.rank not in best or key > best[record.rank][0]:
            best[record.rank] = (key, record.user_frame.location())
    return {rank: location for rank, (_, location) in best.items()}


def _own_errors(evidence: EvidenceSet) -> dict[int, tuple[Evidence, TracebackRecord]]:
    """Ranks whose own exception (not a timeout, not a peer's failure) ended them."""
    out: dict[int, tuple[Evidence, TracebackRecord]] = {}
    for item, record in tracebacks(evidence, dumps=False):
        if record.rank is None or not record.exception:
            continue
        text = f"{record.exception}: {record.message}"
        if reports_a_stop(record) or _NOT_OWN_ERROR.search(text):
            continue
        out.setdefault(record.rank, (item, record))
    return out


def _later(new: Position, old: Position | None, order: dict[str, int], lowest: bool) -> bool:
    if old is None:
        return True
    if new.seq is not None and old.seq is not None and new.seq != old.seq:
        return new.seq < old.seq if lowest else new.seq > old.seq
    return order.get(new.evidence, 0) >= order.get(old.evidence, 0)


def _place(ledger: Ledger, position: Position, order: dict[str, int], lowest: bool = False) -> None:
    """Keep a rank's latest position, or with `lowest` its oldest stuck one."""
    if _later(position, ledger.positions.get(position.rank), order, lowest):
        ledger.positions[position.rank] = position


def _fingerprints(evidence: EvidenceSet, order: dict[str, int]) -> Ledger:
    """Each rank's last fingerprint: its own lines first, peers' full fingerprints as fallback."""
    ledger = Ledger("fingerprint", "default")
    hearsay: dict[int, Position] = {}
    for item, sig in signals(evidence, "hang.fingerprint", "hang.fingerprint_mismatch"):
        f = sig.fields
        if sig.rank is not None and f.get("op"):
            own = Position(
                sig.rank,
                f.get("seq"),
                f["op"],
                _shape(f.get("shape")),
                f.get("dtypes"),
                True,
                item.id,
            )
            _place(ledger, own, order)
        if "peer" in f and not f.get("peer_partial", True) and f.get("peer_op"):
            hearsay[int(f["peer"])] = Position(
                int(f["peer"]),
                f.get("peer_seq"),
                f["peer_op"],
                _shape(f.get("peer_shape")),
                f.get("peer_dtypes"),
                True,
                item.id,
            )
    for rank, position in hearsay.items():
        ledger.positions.setdefault(rank, position)
    return ledger


def _shape(text: str | None) -> str | None:
    return None if text is None else f"[{text}]"


def _watchdog(
    evidence: EvidenceSet, progress: list[tuple[Evidence, LogSignal]], order: dict[str, int]
) -> list[Ledger]:
    """Per process group, each rank's oldest timed-out work, or how far it got meanwhile.

    Work numbers count per process group. Watchdog lines without a `[PG ...]` prefix are
    compared only when every rank reports a single work: several numbers on one rank come
    from several groups, and a rank of another group would look thousands of works away.
    """
    timeouts: dict[int, dict[int | None, tuple[Evidence, LogSignal]]] = defaultdict(dict)
    for item, sig in signals(evidence, "hang.watchdog_timeout"):
        if sig.rank is not None and sig.fields.get("op") not in _P2P:
            timeouts[sig.rank].setdefault(sig.fields.get("seq"), (item, sig))
    by_scope: dict[str, Ledger] = {}
    for item, sig in progress:
        f, rank = sig.fields, sig.rank
        if rank is None:
            continue
        scope = str(f.get("pg", "?"))
        ledger = by_scope.setdefault(scope, Ledger("watchdog", scope))
        if "seq" in f:
            timeout = timeouts[rank].pop(f["seq"], None)
            position = _timed_out(rank, f["seq"], timeout, item.id)
        elif f["last_enqueued"] > f["last_completed"]:
            position = Position(rank, f["last_completed"] + 1, None, evidence=item.id)
        else:
            position = Position(rank, f["last_completed"], None, waiting=False, evidence=item.id)
        _place(ledger, position, order, lowest=True)
    loose = by_scope.pop("?", Ledger("watchdog", "?"))
    left = {rank: works for rank, works in timeouts.items() if works}
    if all(len(works) == 1 for works in left.values()):
        scoped = list(by_scope.values())
        for rank, works in left.items():
            ((seq, found),) = works.items()
            position = _timed_out(rank, seq, found, found[0].id)
            home = next(
                (
                    ledger
                    for ledger in scoped
                    if rank not in ledger.positions
                    and seq in {p.seq for p in ledger.positions.values()}
                ),
                loose,
            )
            home.positions.setdefault(rank, position)
    return [*by_scope.values(), loose]


def _timed_out(
    rank: int, seq: int | None, timeout: tuple[Evidence, LogSignal] | None, evidence_id: str
) -> Position:
    if timeout is None:
        return Position(rank, seq, None, evidence=evidence_id)
    f = timeout[1].fields
    size = f.get("numel_in", f.get("shape"))
    return Position(
        rank, seq, f.get("op"), None if size is None else str(size), evidence=timeout[0].id
    )


def _opcounts(evidence: EvidenceSet, order: dict[str, int]) -> list[Ledger]:
    """Each rank's last enqueued op on its largest communicator (the world, usually)."""
    found = signals(evidence, "hang.nccl_coll")
    per_rank: dict[int, list[tuple[Evidence, LogSignal]]] = defaultdict(list)
    for item, sig in found:
        if sig.rank is not None:
            per_rank[sig.rank].append((item, sig))
    source = "opcount"
    if not per_rank:
        per_rank, source = _by_device(found), "opcount_device"
    ledgers: dict[int, Ledger] = {}
    for rank, items in per_rank.items():
        nranks = max(int(s.fields["nranks"]) for _, s in items)
        ledger = ledgers.setdefault(nranks, Ledger(source, f"{nranks} ranks"))
        for item, sig in items:
            if int(sig.fields["nranks"]) != nranks:
                continue
            f = sig.fields
            size, dtype = str(f["count"]), f"datatype {f['datatype']}"
            _place(
                ledger, Position(rank, f["opcount"], f["coll"], size, dtype, True, item.id), order
            )
    return list(ledgers.values())


def _prints(evidence: EvidenceSet, order: dict[str, int]) -> Ledger:
    """Each rank's last print before a collective: the one it went into and did not leave
    or left last (sizes where the print shows a tensor's)."""
    ledger = Ledger("print", "default")
    for item, sig in signals(evidence, "hang.progress_print"):
        if sig.rank is not None and sig.fields.get("entering"):
            f = sig.fields
            _place(
                ledger, Position(sig.rank, None, f["op"], f.get("shape"), evidence=item.id), order
            )
    return ledger


def _by_device(
    found: list[tuple[Evidence, LogSignal]],
) -> dict[int, list[tuple[Evidence, LogSignal]]]:
    """COLL lines no line ties to a rank, keyed by the CUDA device in NCCL's prefix: on one
    host, where each process names another device, the device is the process's local rank
    (`grep -r NCCL` over per-rank files, without the init lines that name ranks)."""
    devices: dict[tuple[str | None, int | None], set[int]] = defaultdict(set)
    for _, sig in found:
        if sig.device is not None:
            devices[(sig.host, sig.pid)].add(sig.device)
    named = [next(iter(d)) for d in devices.values() if len(d) == 1]
    one_host = len({host for host, _ in devices}) == 1
    if (
        len(named) < 2
        or len(named) != len(devices)
        or len(set(named)) != len(named)
        or not one_host
    ):
        return {}
    per_device: dict[int, list[tuple[Evidence, LogSignal]]] = defaultdict(list)
    for item, sig in found:
        if sig.device is not None:
            per_device[sig.device].append((item, sig))
    return per_device


def split(ledger: Ledger, locations: dict[int, Location]) -> Split | None:
    """The minority of a ledger: ranks at another collective, or with other sizes.

    Ranks group by (number, op); without a difference there, by sizes. The culprits are
    every rank outside the largest group. A tie is broken by a rank-dependent `if` around
    one side's call (when the source is readable), then by the side that is behind.
    """
    positions = list(ledger.positions.values())
    ops_at: dict[int | None, set[str]] = defaultdict(set)
    for p in positions:
        if p.op:
            ops_at[p.seq].add(p.op)

    def where(p: Position) -> tuple[object, ...]:
        known = ops_at[p.seq]
        op = p.op or (next(iter(known)) if len(known) == 1 else None)
        return (p.seq, op, p.waiting)

    groups = _groups(positions, where)
    how = "op" if len({p.op for p in positions if p.op}) > 1 else "seq"
    if len(groups) == 1:
        sized = [p for p in positions if (p.size or p.dtype) and not _uneven_op(p.op)]
        groups = _groups(sized, lambda p: (p.size, p.dtype))
        how = "shape"
        if len(groups) < 2:
            return None
    groups.sort(key=lambda g: -len(g))
    tied = [g for g in groups if len(g) == len(groups[0])]
    branch = ""
    if len(tied) == 1:
        chosen: list[Position] | None = groups[0]
    else:
        chosen, branch = _break_tie(tied, locations)
    if chosen is None:
        culprits, majority, decided = [p for g in tied for p in g], [], False
    else:
        culprits = [p for g in groups if g is not chosen for p in g]
        majority, decided = chosen, True
    if chosen is not None and not branch:
        branch = _branch(culprits, locations)
    return Split(ledger, culprits, majority, how, decided, _gap(culprits, majority), branch)


def _groups(
    positions: list[Position], key: Callable[[Position], tuple[object, ...]]
) -> list[list[Position]]:
    out: dict[tuple[object, ...], list[Position]] = {}
    for p in positions:
        out.setdefault(key(p), []).append(p)
    return list(out.values())


def _uneven_op(op: str | None) -> bool:
    """All-to-all splits and point-to-point ops may legitimately differ in size across ranks."""
    return op is None or op.startswith(_UNEVEN_SPLITS) or op in _P2P


def _branch(culprits: list[Position], locations: dict[int, Location]) -> str:
    for p in culprits:
        loc = locations.get(p.rank)
        if loc is not None and loc.line is not None:
            block = rank_condition(loc.file, loc.line)
            if block is not None:
                return f"{loc.file}:{loc.line} sits under `{block.text}` (line {block.start})"
    return ""


def _break_tie(
    tied: list[list[Position]], locations: dict[int, Location]
) -> tuple[list[Position] | None, str]:
    """The group to call the majority when two are the same size, or None."""
    branches = [(g, _branch(g, locations)) for g in tied]
    conditional = [(g, b) for g, b in branches if b]
    if len(conditional) == 1:
        culprit, text = conditional[0]
        return next(g for g in tied if g is not culprit), text
    seqs = [min((p.seq for p in g if p.seq is not None), default=None) for g in tied]
    first, second = seqs if len(seqs) == 2 else (None, None)
    if first is not None and second is not None and first != second:
        return (tied[0] if first > second else tied[1]), ""
    return None, ""


def _gap(culprits: list[Position], majority: list[Position]) -> int | None:
    ahead = next((p.seq for p in majority if p.seq is not None), None)
    behind = [p.seq for p in culprits if p.seq is not None]
    if ahead is None or not behind:
        return None
    return max(abs(ahead - b) for b in behind)


def positions_text(positions: list[Position], limit: int = 4) -> str:
    """'rank 1 at BROADCAST #3 (size 1, Long); ranks 0,2 at BROADCAST #4 (...)'."""
    by_where: dict[str, list[int]] = defaultdict(list)
    for p in positions:
        by_where[p.describe()].append(p.rank)
    parts = [
        f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)} at {where}"
        for where, ranks in list(by_where.items())[:limit]
    ]
    return "; ".join(parts)
