"""What the Flight Recorder hang rules share: the stuck points and how to read their sides."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from triage.models import Evidence, Location
from triage.observations import FRSide, FRStuckGroup
from triage.readers.source import (
    Block,
    excludes_ranks,
    guard,
    innermost_function,
    innermost_loop,
    leaves_loop,
    rank_condition,
    source_available,
)
from triage.registry import EvidenceSet

UNSEEN = ("no_dump", "unreadable", "unknown")


def stuck_groups(evidence: EvidenceSet) -> list[tuple[Evidence, FRStuckGroup]]:
    """Stuck points that are causes, not victims of another group's stuck point."""
    return [(e, p) for e, p in evidence.payloads(FRStuckGroup) if p.root]


def majority(point: FRStuckGroup) -> FRSide | None:
    return next((s for s in point.sides if s.state == "waiting"), None)


def agreeing(point: FRStuckGroup) -> FRSide | None:
    """The side every member that dumped readably is on (all wait in the same collective),
    or None when some member is behind, elsewhere or in another op."""
    normal = majority(point)
    if normal is None or any(s is not normal and s.state != "unreadable" for s in point.sides):
        return None
    return normal


def coverage(point: FRStuckGroup) -> float:
    """Confidence shrinks with the members whose state the dumps do not show."""
    unseen = sum(len(s.ranks) for s in point.sides if s.state in UNSEEN) + point.more_ranks
    return 1.0 - 0.4 * unseen / max(1, point.members)


def is_subgroup(point: FRStuckGroup) -> bool:
    return point.members < point.world


def split(point: FRStuckGroup, state: str) -> tuple[FRSide | None, list[FRSide], bool]:
    """(the side others agree with, the outlier sides in `state`, whether it was a tie).

    On a tie, the side whose call sits under a rank-dependent `if` (when the source can be
    read) is the odd one; else the side whose op the group never ran before: a collective
    under a rank-dependent branch is new, the loop's own collective is not."""
    normal = majority(point)
    odd = [s for s in point.sides if s.state == state]
    if normal is None or not odd:
        return normal, odd, False
    contenders = [s for s in (normal, *odd) if len(s.ranks) == len(normal.ranks)]
    if len(contenders) == 1:
        return normal, odd, False
    branched = [s for s in contenders if _under_rank_condition(s)]
    if len(branched) == 2 == len(contenders):  # `if rank == 0: a() else: b()`
        branched = [s for s in branched if not _under_excluding_condition(s)]
    if len(branched) == 1 and len(contenders) == 2:
        other = next(s for s in contenders if s is not branched[0])
        if left_out_by(branched[0]) is not None:  # its `if` let it in and left the other out
            return branched[0], [other], False
        return other, branched, False
    novel = [s for s in contenders if s.novel]
    if len(novel) == 1 and len(contenders) == 2:
        other = next(s for s in contenders if s is not novel[0])
        return other, novel, False
    return normal, odd, True


def where(side: FRSide | None) -> str:
    if side is None or side.op is None or side.op.location is None:
        return ""
    loc = side.op.location
    return f" at {Path(loc.file).name}:{loc.line}"


def location(side: FRSide | None) -> Location | None:
    return side.op.location if side is not None and side.op is not None else None


def ranks_of(sides: Iterable[FRSide]) -> list[int]:
    return sorted({r for s in sides for r in s.ranks})


def left_the_loop(ahead: FRSide, behind: FRSide) -> bool | None:
    """Did `ahead` leave the loop that still holds `behind`? None when the source cannot tell.

    Ranks that ran out of data stand after the training loop (a final barrier, a checkpoint
    gather) at the sequence number where the others run the loop's next collective. The
    recorded lines tell it from a conditional collective: in one function, `ahead` lies
    after `behind`, outside `behind`'s innermost loop, neither line under a rank-dependent
    `if` (a collective one rank skipped puts it ahead too), and `ahead` not under an `if` of
    its own inside an outer loop both still run (a data-dependent collective).
    """
    a, b = location(ahead), location(behind)
    if a is None or b is None or a.line is None or b.line is None or a.file != b.file:
        return None
    if not source_available(a.file):
        return None
    if innermost_function(a.file, a.line) != innermost_function(b.file, b.line):
        return None
    return bool(leaves_loop(a.file, a.line, b.line))


def apart_by_the_loop(normal: FRSide | None, side: FRSide) -> bool:
    """The source shows one of the two sides past the loop that still holds the other."""
    return normal is not None and bool(left_the_loop(side, normal) or left_the_loop(normal, side))


def is_barrier(side: FRSide) -> bool:
    """gloo records `barrier`, NCCL since torch 2.6 `all_reduce_barrier`."""
    return side.op is not None and side.op.op.endswith("barrier")


def rank_branch(sides: list[FRSide | None]) -> tuple[Block, Location] | None:
    """The rank-dependent `if` around one of these sides' calls, read from the source."""
    for side in sides:
        loc = location(side) if side is not None else None
        if loc is not None and loc.line is not None:
            block = rank_condition(loc.file, loc.line)
            if block is not None:
                return block, loc
    return None


def guarded_call(side: FRSide | None) -> tuple[Block, Location] | None:
    """The `if` around this side's call, in its own function, whose test may differ per
    rank (`if ctx.sync:`, `if loss < best:`): ranks where it was false skipped the call."""
    loc = location(side)
    if loc is None or loc.line is None:
        return None
    block = guard(loc.file, loc.line, innermost_function(loc.file, loc.line))
    return (block, loc) if block is not None else None


def left_out_by(side: FRSide | None) -> tuple[Block, Location] | None:
    """The rank-dependent `if` inside a loop, around this side's call, that leaves some
    ranks out (`if not (rank == 2 and step == 3):`): the ranks it left out skipped the call
    once and went on. (Outside a loop, `if rank != 1:` on two ranks reads either way.)"""
    found = rank_branch([side])
    if found is None or found[0].negated or not excludes_ranks(found[0]) or found[1].line is None:
        return None
    return found if innermost_loop(found[1].file, found[1].line) is not None else None


def _under_excluding_condition(side: FRSide) -> bool:
    found = rank_branch([side])
    return found is not None and excludes_ranks(found[0])


def _under_rank_condition(side: FRSide) -> bool:
    return rank_branch([side]) is not None
