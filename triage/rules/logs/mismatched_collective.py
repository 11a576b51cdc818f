"""hang.mismatched_collective from logs: ranks stand at different collectives."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from triage.models import Evidence, Finding, Location
from triage.observations import Frame, LogSignal, TracebackRecord
from triage.readers.source import Block
from triage.registry import EvidenceSet, rule
from triage.rules.logs._hang_lines import (
    Split,
    hang_log,
    positions_text,
    same_op_reports,
)
from triage.rules.logs._refusals import refusals, refused
from triage.rules.logs._signals import ids, signals, stacks_in_collectives
from triage.rules.logs._trace_split import TraceSplit, skipped_call
from triage.rules.stacks._hang_view import SKIP_STORY, StateGroup, skip_fix
from triage.text import format_ranks, rank_label

# How much a disagreement in each source says: DETAIL fingerprints are checked by torch
# itself; watchdog sequence numbers and opCounts can also lag for a moment on a slow rank.
_TRUST = {
    "fingerprint": 0.85,
    "watchdog": 0.75,
    "opcount": 0.7,
    "opcount_device": 0.6,
    "print": 0.55,
}


@rule("logs.mismatched_collective", "hang.mismatched_collective")
def mismatched_collective(evidence: EvidenceSet) -> Iterator[Finding]:
    """The logs put some ranks at another collective (op or sequence number) than the rest.

    What it detects:
    Per-rank positions that disagree: TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints
    (`Running collective: CollectiveFingerPrint(SequenceNumber=N, OpType=...)`,
    `Detected mismatch between collectives on ranks`), NCCL watchdog timeouts and
    `last enqueued/completed NCCL work` counters, or NCCL COLL opCounts. The culprits are
    the minority: the rank one collective behind or ahead, or the ranks whose op differs.

    Why it happens:
    A collective under a rank-dependent branch (`if rank == 0: dist.broadcast(...)`),
    metrics or logging whose keys differ per rank (each key syncs), collectives issued in
    a different order (dict/set iteration), or an exception handler that skips one.

    Evidence:
    The minority's fingerprint or timed-out work against the majority's, and its user
    line from the rank's traceback; the source's rank-dependent `if` when readable.

    Fix:
    Every rank must issue the same collectives in the same order: move the collective
    out of the rank-dependent branch, or make the branch and the synced keys identical.

    Known false positives:
    Logs cut at different moments per rank; a rank that only lags (it is then idle, and
    hang.rank_not_in_collective scores higher). Gaps of whole steps are hang.uneven_inputs.

    References:
    torch.distributed docs, TORCH_DISTRIBUTED_DEBUG; ProcessGroupWrapper.
    """
    view = hang_log(evidence)
    candidates = [s for s in view.splits if s.how in ("op", "seq")]
    if candidates:
        best = max(candidates, key=_confidence)
        yield _finding(best, view.location(best.ranks), _confidence(best))
        return
    traced = view.traced
    if traced is not None and any(g.creates_group for g in traced.groups):
        return  # ranks in a group's creation wait for its members: logs.subgroup_mismatch
    if traced is not None and traced.past_loop is None:
        yield _from_tracebacks(traced)
        return
    skip = skipped_call(traced) if traced is not None else None
    if skip is not None:
        yield _skipped(*skip)
        return
    yield from _from_reports(evidence)
    yield from _horovod(evidence)
    yield from _checked_calls(evidence)
    yield from _stacks_apart(evidence)


def _stacks_apart(evidence: EvidenceSet) -> Iterator[Finding]:
    """Pasted stacks (frames without an exception) that stand in different collective APIs:
    the processes wait in different collectives, which never match."""
    by_op: dict[str, list[tuple[Evidence, TracebackRecord]]] = {}
    for item, record, op in stacks_in_collectives(evidence):
        if not record.dump:  # dumps are rank states: the stack rules read those
            by_op.setdefault(op, []).append((item, record))
    ranks = {r.rank for found in by_op.values() for _, r in found}
    if len(by_op) < 2 or (len(ranks) == 1 and None not in ranks):
        return
    ops = sorted(by_op)
    firsts = [by_op[op][0][1] for op in ops]
    places = [
        f"in {op}" + (f" (from {r.user_frame.file}:{r.user_frame.line})" if r.user_frame else "")
        for op, r in zip(ops, firsts, strict=True)
    ]
    locations = [r.user_frame.location() for r in firsts if r.user_frame]
    yield Finding(
        title=f"stacks stand in different collectives: {' and '.join(ops)}",
        summary=(
            f"The stacks in the text wait {' and '.join(places)}: processes that wait in"
            " different collectives never match, so each waits for the others forever. Which"
            " side skipped or added a call is not in the text."
        ),
        ranks=sorted(r for r in ranks if r is not None),
        location=locations[0] if locations else None,
        other_locations=locations[1:],
        confidence=0.4,
        evidence=[item.id for op in ops for item, _ in by_op[op][:2]][:8],
        fix=(
            "Every rank must issue the same collectives in the same order: find the"
            " rank-, data- or metric-dependent branch that sends some ranks to "
            f"{ops[0]} and others to {ops[1]} (a checkpoint, an early stop, a metric computed"
            " on local data) and make every rank take the same one."
        ),
        confirm="every rank's stack (py-spy, or TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint"
        " error): ranks split between the two calls",
    )


def _checked_calls(evidence: EvidenceSet) -> Iterator[Finding]:
    """A check that compared the ranks' collectives found them in different calls at one
    step (another op, root, scale factor, device, parameter list or forward order)."""
    found = refusals(evidence, sizes=False)
    if not found:
        return
    line = found[0][1]
    said, confidence = refused(line)
    yield Finding(
        title=f"the ranks' collectives differ: {line.fields['what']}",
        summary=f"{said} The ranks reached different calls; it does not say which rank is the"
        " odd one.",
        ranks=[],
        confidence=confidence,
        evidence=ids(found[:8]),
        fix="Make every rank issue the same collective with the same arguments at that step: a"
        " rank- or data-dependent branch, or code and configuration that differ between nodes,"
        " is the usual source.",
        confirm="every rank's stack (py-spy) at the stall: ranks split between two calls",
    )


def _horovod(evidence: EvidenceSet) -> Iterator[Finding]:
    """Horovod's stall inspector: a tensor some ranks submitted and others did not."""
    stalls = signals(evidence, "hang.horovod_stall")
    if not stalls:
        return
    seconds = stalls[0][1].fields.get("seconds")
    yield Finding(
        title="Horovod: some ranks submitted a collective the others never did",
        summary=(
            f"Horovod's stall inspector saw tensors submitted by a subset of ranks, waiting "
            f"{seconds} s for the rest: the ranks issue different collectives (a rank- or "
            "data-dependent branch, different code or configuration per node), or the missing "
            "ranks are elsewhere. Its `Missing ranks:` lines list who has not submitted which "
            "tensor."
        ),
        ranks=[],
        confidence=0.55,
        evidence=ids(stalls[:4]),
        fix=(
            "Make every rank submit the same tensors in the same order: run the same code and "
            "configuration on every node, and move collectives out of rank- or data-dependent "
            "branches; the `Missing ranks:` list names the ranks to look at."
        ),
        confirm="the missing ranks' stacks (py-spy) are outside the collective or in another one",
    )


def _from_tracebacks(traced: TraceSplit) -> Finding:
    culprit, rest = traced.culprit, traced.majority
    decided = rest is not None
    where = (
        f"{culprit.label} in {culprit.where()}, while {rest.label} "
        f"{rest.verb('wait')} in {rest.where()}"
        if rest is not None
        else f"{traced.sides()}; the logs cannot tell which side is wrong"
    )
    because = f" {traced.branch}." if traced.branch else ""
    confidence = (0.8 if traced.branch else 0.7) if decided else 0.6
    location = traced.skipped or culprit.location
    return Finding(
        title=f"{culprit.label} timed out in a different collective call than the other ranks",
        summary=f"The timed-out collectives' tracebacks put {where}.{because}",
        ranks=culprit.ranks,
        location=location,
        other_locations=[
            loc
            for loc in [culprit.location, rest.location if rest else None]
            if loc and loc != location
        ],
        confidence=confidence,
        evidence=culprit.evidence[:4] + (rest.evidence[:4] if rest else []),
        fix=(
            "Every rank must issue the same collectives in the same order: the call at "
            + (
                f"{traced.skipped} runs under an `if` that leaves {culprit.label} out; make the "
                "test the same on every rank or run the collective unconditionally."
                if traced.skipped
                else f"{culprit.location} runs on {culprit.label} only; move it out of the "
                "rank-dependent branch, or make every rank run it."
            )
        ),
        confirm=f"{culprit.label} logged the same number of steps as the others (not fewer)",
    )


def _skipped(finished: StateGroup, waiting: StateGroup, block: Block, call: Frame) -> Finding:
    """Ranks past the loop while others wait in a collective under an `if` that can differ
    per rank: a skip of that call (or fewer steps: logs.uneven_inputs, ranked below)."""
    return Finding(
        title=f"{finished.label} may have skipped the collective {waiting.label} timed out in",
        summary=(
            f"The timed-out collectives' tracebacks put {waiting.label} in {waiting.where()}, "
            f"a call that runs only under `{block.text}` ({call.file}:{block.start}), and "
            f"{finished.label} already after the loop, in {finished.where()}. {SKIP_STORY}"
        ),
        ranks=finished.ranks,
        location=call.location(),
        other_locations=[loc for loc in [finished.location, waiting.location] if loc],
        confidence=0.6,
        evidence=finished.evidence[:4] + waiting.evidence[:4],
        fix=skip_fix(block, call.file),
        confirm=f"{finished.label} logged as many steps as the others (a skip), not fewer",
    )


def _confidence(split: Split) -> float:
    confidence = _TRUST[split.ledger.source]
    if split.gap is not None and split.gap >= 2:
        confidence = 0.4
    elif split.culprits_idle:
        confidence = 0.45
    if split.branch:
        confidence += 0.05
    return round(confidence * (1.0 if split.decided else 0.8), 3)


def _finding(split: Split, location: Location | None, confidence: float) -> Finding:
    culprits = format_ranks(split.ranks)
    others = (
        f", and {positions_text(split.majority)}"
        if split.majority
        else "; the logs cannot tell which side is wrong"
    )
    because = f" {split.branch}." if split.branch else ""
    return Finding(
        title=f"rank {culprits} entered a different collective than the other ranks",
        summary=(
            f"The {split.ledger.label} put {positions_text(split.culprits)}{others}.{because}"
        ),
        ranks=split.ranks,
        location=location,
        confidence=confidence,
        evidence=split.evidence[:8],
        fix=(
            f"Every rank must issue the same collectives in the same order: find the call rank "
            f"{culprits} makes (or skips) there, usually under a rank-dependent `if` or data- "
            "or metric-dependent control flow, and make every rank run it."
        ),
        confirm=(
            f"rank {culprits}'s stack or Flight Recorder entry is in another collective than "
            "the others, not outside every collective"
        ),
    )


def _from_reports(evidence: EvidenceSet) -> Iterator[Finding]:
    """DETAIL's mismatch errors alone: the rank most reporters name is the odd one."""
    every = signals(evidence, "hang.fingerprint_mismatch")
    reports = [
        (e, s)
        for e, s in every
        if "peer" in s.fields and _differs_in_order(s.fields.get("aspects", ""))
    ]
    if not reports:
        yield from _unpaired(every)
        return
    named = Counter(int(s.fields["peer"]) for _, s in reports)
    reporters = {int(s.fields["rank"]) for _, s in reports}
    odd = [rank for rank, count in named.items() if count >= 2]
    ranks = sorted(odd) if len(odd) == 1 else sorted(reporters | set(named))
    first = reports[0][1].fields
    yield Finding(
        title=f"TORCH_DISTRIBUTED_DEBUG=DETAIL: {rank_label(ranks)} ran a different collective",
        summary=(
            f"Rank {first['rank']} entered {first.get('op', 'a collective')}"
            f"{' #' + str(first['seq']) if 'seq' in first else ''} while rank {first['peer']} "
            f"entered another one{': ' + first['aspects'] if first.get('aspects') else ''}."
        ),
        ranks=ranks,
        confidence=0.75 if len(odd) == 1 else 0.65,
        evidence=ids(reports[:8]),
        fix=(
            "Every rank must issue the same collectives in the same order: compare the user "
            "lines of the ranks' tracebacks and move the collective out of the branch that "
            "only some ranks take."
        ),
        confirm="the ranks' tracebacks end at different collective calls",
    )


def _differs_in_order(aspects: str) -> bool:
    """Shapes alone are hang.shape_mismatch; no aspects means the peer's fingerprint was partial."""
    return not aspects or "Op type" in aspects or "Sequence number" in aspects


def _unpaired(reports: list[tuple[Evidence, LogSignal]]) -> Iterator[Finding]:
    """Older torch's report names only the reporting rank's own fingerprint: the collectives
    differ across ranks, but not which rank is the odd one."""
    own = [(e, s) for e, s in reports if "peer" not in s.fields]
    if not own or same_op_reports(own):  # the same op everywhere: hang.shape_mismatch
        return
    first = own[0][1].fields
    ops = sorted({str(s.fields["op"]) for _, s in own if s.fields.get("op")})
    cut = all(s.fields.get("cut") for _, s in own)
    shown = (
        "the fingerprints that say whether the op, the order or the shapes differ are cut from"
        " the paste"
        if cut
        else f"{', '.join(ops) or 'ops not shown'}; the report does not say which rank is the"
        " odd one"
    )
    yield Finding(
        title="TORCH_DISTRIBUTED_DEBUG=DETAIL: the ranks' collectives differ",
        summary=f"Rank {first['rank']} reports its {first.get('op', 'collective')}"
        f"{' ' + str(first['shape']) if first.get('shape') else ''} as inconsistent with the"
        f" other ranks' ({shown}).",
        ranks=[],
        confidence=0.5 if cut else 0.6,
        evidence=ids(own[:8]),
        fix="Every rank must issue the same collectives in the same order, with the same"
        " shapes: compare the user lines of every rank's traceback at this collective and move"
        " it out of the branch (or the data-dependent size) that differs.",
        confirm="every rank's report at the same collective: the one whose op or shape differs",
    )
