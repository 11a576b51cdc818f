"""hang.rank_not_in_collective from logs: the others time out, this rank was busy elsewhere."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from triage.models import Evidence, Finding, Location
from triage.observations import Frame, RankActivity, TracebackRecord
from triage.readers.stacks import is_user_code
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import TIMEOUT_TEXT
from triage.rules.logs._hang_lines import HangLog, hang_log, short_path
from triage.rules.logs._signals import collective_of, ids, ranks_of, signals, tracebacks
from triage.text import rank_label, rank_subject

# Code paths that typically run on one rank and issue collectives of their own.
_BUSY = re.compile(r"(?i)(?:^|[_.])(save|checkpoint|ckpt|eval|validat|predict|inference)")
# Data loading: torch's DataLoader, a framework's data iterators, a dataset's own code.
_LOADING = re.compile(r"torch/utils/data/|(?:^|/)data/\w*iterators?\.py$|dataset", re.IGNORECASE)


@dataclass
class _Case:
    ranks: list[int]
    confidence: float
    why: str
    evidence: list[str] = field(default_factory=list)
    location: Location | None = None
    title: str = ""


@rule("logs.rank_not_in_collective", "hang.rank_not_in_collective")
def rank_not_in_collective(evidence: EvidenceSet) -> Iterator[Finding]:
    """The ranks that time out wait in a collective that another rank never entered.

    What it detects:
    A rank the others wait for that the logs show elsewhere: monitoredBarrier names it
    (`Ranks 1, 3 failed to pass monitoredBarrier`), its stack dump is outside any
    collective, its NCCL work counters stop one collective short with nothing in flight,
    or it logs but reports no timeout of its own (often only a closed connection later,
    when its peers were gone), or its only line is the launcher's report that its teardown
    stopped it (SIGTERM) while the others timed out in one collective, or PyTorch's desync
    report names it (TORCH_NCCL_DESYNC_DEBUG: `[1] finished collective #5, but didn't join
    collective #6`, 0.8; `ranks [2, 3] are the lagging ranks that caused this timeout. They
    never joined any collectives`, 0.75). Stacks inside
    transformers'/accelerate's main_process_first barrier (the main process runs the block
    alone) with their timeout, weaker cut short. A lone stack dump in checkpoint, save or
    evaluation code is a weaker hint of the classic rank-0-only call.

    Why it happens:
    Rank-dependent work before a collective: evaluation, logging or checkpointing on rank
    0 only (which often issues collectives of its own), a slow or stuck DataLoader, I/O on
    a slow filesystem, a `breakpoint()`. The others wait until the timeout.

    Evidence:
    Timeouts on the waiting ranks; for the culprit, the barrier report, its dump or
    traceback frames, its work counters.

    Fix:
    Make the culprit reach the collective: run the rank-0-only work on every rank or after
    the collective, fix the stuck loader or I/O, or raise the process-group timeout when
    the work is legitimately long.

    Known false positives:
    A rank whose log was cut early looks like one that reported nothing; a merely slow
    rank looks the same in one snapshot; a rank the launcher's teardown stopped a moment
    before its own timeout fired looks like one that never entered. A lone dump in checkpoint code may be a rank
    that waits in a collective the others skipped (hang.mismatched_collective).

    References:
    torch.distributed.monitored_barrier; torch.distributed docs, "Debugging".
    """
    view = hang_log(evidence)
    exits = {s.rank for _, s in view.launcher if s.rank is not None} - view.stopped
    dead = exits | set(view.own_errors)
    cases = [
        *_barrier(view, dead),
        *_stacks(view),
        *_idle(view),
        *_quiet(evidence, view, dead),
        *_lone_dump(view),
        *_main_first(evidence, view, dead),
        *_desync(evidence, dead),
    ]
    if not cases:
        return
    best = max(cases, key=lambda c: c.confidence)
    who = rank_label(best.ranks) if best.ranks else "the dumped rank"
    yield Finding(
        title=best.title
        or f"{who} did not reach the collective {'their' if len(best.ranks) > 1 else 'its'} "
        "peers wait in",
        summary=best.why,
        ranks=best.ranks,
        location=best.location or view.location(best.ranks),
        other_locations=[
            loc for loc in [view.location(sorted(view.waiting))] if loc and best.ranks
        ],
        confidence=best.confidence,
        evidence=best.evidence[:8],
        fix=(
            f"Make {who} reach the collective: move rank-dependent work (evaluation, "
            "logging, checkpointing) after the collective or run it on every rank, fix a stuck "
            "DataLoader or slow I/O, or raise the process-group timeout when the work is "
            "legitimately long."
        ),
        confirm=(
            f"{who}'s stack (py-spy) while hung is outside any collective, not in a "
            "different collective and not exited"
        ),
    )


def _waiting_text(view: HangLog) -> str:
    return rank_label(sorted(view.waiting)) if view.waiting else "the other ranks"


def _barrier(view: HangLog, dead: set[int]) -> list[_Case]:
    missing = sorted(set(view.barrier_missing) - dead)
    if not missing:
        return []
    ids = [i for r in missing for i in view.barrier_missing[r]]
    return [
        _Case(
            missing,
            0.8,
            f"Rank 0's monitoredBarrier gave up waiting for {rank_label(missing)}, "
            "which never arrived, while the other ranks did: "
            f"{rank_subject(missing, 'were')} not in the collective.",
            ids,
        )
    ]


def _stacks(view: HangLog) -> list[_Case]:
    if not view.waiting:
        return []
    out = []
    for item, state in view.stacks:
        if (
            state.rank is None
            or state.rank in view.waiting
            or state.activity.waits_on_peers
            or state.activity is RankActivity.exiting
        ):
            continue
        at = f" at {state.user_frame.location()}" if state.user_frame else ""
        out.append(
            _Case(
                [state.rank],
                0.75,
                f"{_waiting_text(view).capitalize()} timed out in a collective while rank "
                f"{state.rank}'s stack shows it {state.describe()}{at}, outside any collective.",
                [item.id, *next(iter(view.waiting.values()))[:2]],
                state.user_frame.location() if state.user_frame else None,
            )
        )
    return out


def _idle(view: HangLog) -> list[_Case]:
    out = []
    for split in view.splits:
        if split.ledger.source != "watchdog" or not split.culprits_idle or not split.decided:
            continue
        done = min(p.seq for p in split.culprits if p.seq is not None)
        out.append(
            _Case(
                split.ranks,
                0.65,
                f"{rank_label(split.ranks).capitalize()} had completed NCCL work #{done} and enqueued "
                f"nothing after it, while {rank_subject(sorted(p.rank for p in split.majority), 'wait')} "
                f"in work #{split.majority[0].seq}: "
                f"{'it' if len(split.ranks) == 1 else 'they'} never issued that collective.",
                split.evidence,
            )
        )
    return out


def _quiet(evidence: EvidenceSet, view: HangLog, dead: set[int]) -> list[_Case]:
    """Ranks that log but report no timeout while others time out."""
    if not view.waiting:
        return []
    # A rank in another collective call than the others' was in a collective all the same.
    traced = (
        {s.rank for g in view.traced.groups for s in g.states if s.rank is not None}
        if view.traced
        else set()
    )
    quiet = sorted(view.present - set(view.waiting) - dead - set(view.barrier_missing) - traced)
    waiting_ids = [i for r in sorted(view.waiting) for i in view.waiting[r][:1]]
    out = _stopped_silent(view, dead | set(view.barrier_missing) | traced, waiting_ids)
    if not quiet:
        return out
    observed = {s.rank for _, s in signals(evidence, "hang.dump_signal_observed")}
    silent = []
    for rank in quiet:
        busy = _busy_frame_of(view, rank)
        if busy is not None:
            frame, item_id = busy
            why = (
                f"{_waiting_text(view).capitalize()} timed out in a collective while rank {rank} "
                f"was in {frame.function} ({frame.file}:{frame.line}), checkpoint or evaluation "
                "code, and reported no timeout itself."
            )
            out.append(_Case([rank], 0.65, why, [item_id, *waiting_ids], frame.location()))
        elif rank in view.lost_peer or rank in observed:
            late = rank in view.lost_peer
            how = (
                "only a lost connection later, when its peers were already gone"
                if late
                else "only the dump signal of a rank that did"
            )
            why = (
                f"{_waiting_text(view).capitalize()} timed out in a collective; rank {rank} "
                f"reported no timeout of its own, {how}: it was not in the collective."
            )
            out.append(_Case([rank], 0.55 if late else 0.45, why, waiting_ids))
        else:
            silent.append(rank)
    if silent:
        out.append(_silent(view, silent, waiting_ids))
    return out


def _stopped_silent(view: HangLog, excluded: set[int], waiting_ids: list[str]) -> list[_Case]:
    """Ranks whose only line is the launcher's report that its teardown stopped them
    (SIGTERM after another rank failed), while every rank that logged timed out in one
    collective: a rank in that collective would have timed out too, unless the teardown
    came first. Few such ranks beside more (or one) that timed out read as the culprit."""
    ranks = sorted(view.stopped - set(view.waiting) - view.present - excluded)
    if not ranks or not view.one_wait():
        return []
    few = len(ranks) < len(view.waiting) or len(ranks) == 1
    who = rank_label(ranks)
    why = (
        f"{_waiting_text(view).capitalize()} timed out in one collective; {who} logged nothing"
        " and appears only in the launcher's report, stopped by its teardown (SIGTERM): a rank"
        " in that collective would have timed out too, so "
        f"{who} was elsewhere (or the teardown stopped {'it' if len(ranks) == 1 else 'them'}"
        " before its own timeout fired)."
    )
    ids = [item.id for item, s in view.launcher if s.rank in ranks]
    return [_Case(ranks, 0.55 if few else 0.4, why, ids[:4] + waiting_ids)]


def _silent(view: HangLog, ranks: list[int], waiting_ids: list[str]) -> _Case:
    """Ranks whose logs say nothing of the collective their peers time out in.

    Their own log in hand, stopping short of any timeout, while every peer reports the same
    collective, is the culprit's trace: a rank in that collective would have timed out too.
    Without their files it is weaker: the lines that name them may be all there is.
    """
    logs = [view.rank_logs[r] for r in ranks if r in view.rank_logs]
    confidence = 0.6 if logs and view.one_wait() else 0.4
    who = rank_label(ranks)
    ends = "; ".join(
        f"{short_path(info.path)} ends at line {info.lines}"
        + (f" with `{info.last_line[:80]}`" if info.last_line else "")
        for _, info in logs[:3]
    )
    why = (
        f"{_waiting_text(view).capitalize()} timed out in a collective; {who} logged no "
        f"timeout of {'its' if len(ranks) == 1 else 'their'} own"
        + (f" ({ends})" if ends else "")
        + ": a rank in that collective would have timed out too, so "
        + f"{who} never reached it (or reached it late)."
    )
    return _Case(ranks, confidence, why, [item.id for item, _ in logs] + waiting_ids)


def _main_first(evidence: EvidenceSet, view: HangLog, dead: set[int]) -> list[_Case]:
    """Tracebacks through main_process_first's barrier: the ranks that show it waited there
    while the main process ran the block alone; with their timeout it is the classic
    preprocessing that outlasted the process group's timeout, without it a cut stack."""
    inside = signals(evidence, "hang.main_process_first")
    if not inside or dead or view.own_errors or _raised_other_than_timeout(evidence):
        return []
    timed_out = bool(view.timeouts or signals(evidence, "generic.collective_stall"))
    waiting = ranks_of(s for _, s in inside)
    who = rank_label(waiting) if waiting else "the ranks whose stacks these are"
    why = (
        f"{who.capitalize()} waited in main_process_first's barrier (`{inside[0][1].text.strip()[:90]}`)"
        ", which every rank but the main one enters first while the main process runs the block"
        " alone (dataset tokenization, downloads, caching)"
        + (
            ", and timed out there: the block outlasted the process group's timeout."
            if timed_out
            else "; the stack stops there, and a block longer than the process group's"
            " timeout (30 minutes by default) times them out."
        )
    )
    local = any(
        str(s.fields.get("frame") or s.fields.get("call")).startswith("local_") for _, s in inside
    )
    return [
        _Case(
            [] if local else [0],  # local_main_process_first: local rank 0 of every node
            0.6 if timed_out else 0.35,
            why,
            [item.id for item, _ in inside[:4]],
            title="the main process ran main_process_first's block alone past the timeout",
        )
    ]


def _desync(evidence: EvidenceSet, dead: set[int]) -> list[_Case]:
    """PyTorch's desync report reads the ranks' traces in the store: the ranks it names did
    not reach the collective the reporter times out in (finished the one before, or never
    joined any). A named rank that exited is the exit's to explain."""
    cases: list[_Case] = []
    for name, confidence, how in (
        ("hang.desync_lagging", 0.8, "finished the collective before and never joined it"),
        ("hang.desync_never_joined", 0.75, "never joined any collective"),
    ):
        found = signals(evidence, name)
        ranks = sorted({r for _, s in found for r in s.fields["ranks"]} - dead)
        if not ranks:
            continue
        who = rank_label(ranks)
        seq = next((s.fields["seq"] + 1 for _, s in found if s.fields.get("seq")), None)
        at = f" (#{seq})" if seq else ""
        cases.append(
            _Case(
                ranks=ranks,
                confidence=confidence,
                why=f"PyTorch's desync report (TORCH_NCCL_DESYNC_DEBUG), read from every rank's"
                f" trace in the store: {who} {how}{at} the timed-out ranks wait in:"
                f" `{found[0][1].text.strip()[:160]}`.",
                evidence=ids(found),
                title=f"{who} never joined the collective{at} the others time out in",
            )
        )
    return cases


def _raised_other_than_timeout(evidence: EvidenceSet) -> bool:
    """A traceback ends in an exception that is no timeout: an error of its own (an NCCL
    system error in that barrier is a transport's failure, not a wait)."""
    return any(
        record.exception and not TIMEOUT_TEXT.search(f"{record.exception}: {record.message}")
        for _, record in tracebacks(evidence, dumps=False)
    )


def _busy_frame_of(view: HangLog, rank: int) -> tuple[Frame, str] | None:
    for item, record in reversed(view.dumps):
        if record.rank == rank and (frame := busy_frame(record.frames)) is not None:
            return frame, item.id
    return None


def _lone_dump(view: HangLog) -> list[_Case]:
    """One process's dump, in checkpoint/save/evaluation code: the classic rank-0-only call."""
    owners = {
        (r.rank, r.pid, r.path if r.rank is None and r.pid is None else "") for _, r in view.dumps
    }
    if len(owners) != 1:
        return []
    busy = [(item, r, f) for item, r in view.dumps if (f := busy_frame(r.frames)) is not None]
    if not busy:
        return _lone_loader(view)
    item, record, frame = busy[0]
    who = _who(record)
    return [
        _lone_case(
            item,
            record,
            0.45,
            f"The only stack dump shows {who} in {frame.function} ({frame.file}:{frame.line}), "
            "checkpoint, save or evaluation code. Such code often runs on one rank only and "
            "issues collectives of its own, so the ranks part ways there; this is a hint, not "
            "a proof: dump every rank to confirm.",
            frame.location(),
            f"{who} sits in {frame.function}, where one-rank-only calls part the ranks",
        )
    ]


def _lone_loader(view: HangLog) -> list[_Case]:
    """One process's dump that waits for its data, with no collective on any of its threads:
    the rank the others wait for in the next collective, while its loader stalls."""
    if any(collective_of(record) for _, record in view.dumps):
        return []
    found = []
    for item, record in view.dumps:
        loading = [i for i, f in enumerate(record.frames) if _LOADING.search(f.file)]
        if not loading:
            continue
        frame = record.frames[loading[-1]]
        # the loop that asked for the batch: past the loader and the iterator protocol's wrappers
        outer = record.frames[loading[-1] + 1 :]
        caller = next((f for f in outer if f.function not in ("__iter__", "__next__")), None)
        found.append((caller is not None, item, record, frame, caller))
    if not found:
        return []
    # the thread whose own loop waits (the main thread), not a loader's background thread
    _, item, record, frame, caller = max(found, key=lambda candidate: candidate[0])
    who = _who(record)
    return [
        _lone_case(
            item,
            record,
            0.35,
            f"The only stack dump shows {who} waiting for its data in {frame.function}"
            f" ({short_path(frame.file)}:{frame.line}), outside any collective: a rank"
            " whose loader stalls (a DataLoader worker stuck or dead, slow storage, a"
            " prefetch queue that never fills) leaves the others waiting in the next"
            " collective. This is a hint, not a proof: dump every rank to confirm.",
            (caller or frame).location(),
            f"{who} waits for its data in {frame.function}, outside any collective",
        )
    ]


def _who(record: TracebackRecord) -> str:
    return f"rank {record.rank}" if record.rank is not None else "the dumped rank"


def _lone_case(
    item: Evidence,
    record: TracebackRecord,
    confidence: float,
    why: str,
    location: Location,
    title: str,
) -> _Case:
    """The case one process's dump makes: its rank (when known) and its dump as evidence."""
    return _Case(ranks_of([record]), confidence, why, [item.id], location, title)


def busy_frame(frames: Sequence[Frame]) -> Frame | None:
    """The call into checkpoint/save/evaluation code: the outermost frame of the innermost run
    of such frames (user code preferred), e.g. the trainer's `_save_checkpoint`."""
    run: list[Frame] = []
    for frame in frames:
        if _BUSY.search(frame.function):
            run.append(frame)
        elif run:
            break
    user = [f for f in run if is_user_code(f.file)] or run
    return user[-1] if user else None
