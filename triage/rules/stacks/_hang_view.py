"""What the hang rules share: ranks grouped by state, the majority, and the outliers."""

from __future__ import annotations

from dataclasses import dataclass, field

from triage.grouping import state_groups
from triage.models import Location
from triage.observations import Frame, MissingRank, RankActivity, RankProcess, RankState
from triage.readers.source import (
    Block,
    condition,
    excludes_ranks,
    guard,
    innermost_function,
    innermost_loop,
    leaves_loop,
    rank_condition,
    skippable_collective,
    source_available,
)
from triage.registry import EvidenceSet
from triage.text import agree, rank_label

#: The world's own set-up: ranks waiting there wait for the world, not for a group's members.
_WORLD_SETUP = frozenset(
    {"init_process_group", "rendezvous", "_create_c10d_store", "_get_or_create_default_group"}
)


@dataclass
class StateGroup:
    """Ranks with one signature; `evidence` are their stack evidence ids."""

    states: list[RankState]
    evidence: list[str] = field(default_factory=list)

    @property
    def first(self) -> RankState:
        return self.states[0]

    @property
    def ranks(self) -> list[int]:
        return sorted(s.rank for s in self.states if s.rank is not None)

    @property
    def label(self) -> str:
        if self.ranks:
            return rank_label(self.ranks)
        return f"pid {self.first.pid}" if self.first.pid >= 0 else "a process of unknown rank"

    def verb(self, verb: str) -> str:
        """`verb` (plural form) agreeing with the label: 'rank 2 stands', 'ranks 0-1 stand'."""
        return agree(len(self.ranks) or 1, verb)

    @property
    def waits(self) -> bool:
        return self.first.activity.waits_on_peers

    @property
    def creates_group(self) -> bool:
        """In a group's creation (new_group, a mesh), not the world's own set-up."""
        return self.first.activity is RankActivity.group_setup and self.first.op not in _WORLD_SETUP

    @property
    def location(self) -> Location | None:
        frame = self.first.user_frame
        return frame.location() if frame else None

    def where(self) -> str:
        loc = self.location
        return f"{self.first.describe()} at {loc.file}:{loc.line}" if loc else self.first.describe()


@dataclass
class HangView:
    groups: list[StateGroup]
    missing: list[MissingRank]
    zombies: list[RankProcess]
    unreadable: int

    @property
    def waiting(self) -> list[StateGroup]:
        return [g for g in self.groups if g.waits]

    @property
    def majority(self) -> StateGroup | None:
        waiting = self.waiting
        return (
            max(waiting, key=lambda g: (len(g.states), -min(g.ranks or [0]))) if waiting else None
        )

    @property
    def live_count(self) -> int:
        return sum(len(g.states) for g in self.groups)


def hang_view(evidence: EvidenceSet) -> HangView:
    return evidence.derived("hang_view", lambda: _build_view(evidence))


def _build_view(evidence: EvidenceSet) -> HangView:
    groups = [
        StateGroup([state for _, state in members], [item.id for item, _ in members])
        for members in state_groups(evidence)
    ]
    groups.sort(key=lambda g: (-len(g.states), min(g.ranks or [0])))
    missing_items = evidence.payloads(MissingRank)
    processes = [p for _, p in evidence.payloads(RankProcess)]
    stacked = {s.pid for g in groups for s in g.states}
    # A rank its stack names (mp.spawn's index, read from the frames' locals) is alive,
    # whatever its environment failed to say when its process was discovered.
    read = {s.rank for g in groups for s in g.states if s.rank is not None}
    return HangView(
        groups=groups,
        missing=[m for _, m in missing_items if m.scope == "host" and m.rank not in read],
        zombies=[p for p in processes if p.status == "zombie"],
        unreadable=sum(1 for p in processes if p.pid not in stacked and p.status != "zombie"),
    )


def coverage_factor(view: HangView) -> float:
    """Confidence shrinks when some live ranks could not be read, and when some stacks come
    from text that names neither their rank nor their pid: those may be one process dumped
    twice, or threads of one process, not ranks that disagree."""
    total = view.live_count + view.unreadable
    read = 1.0 if total == 0 else 0.6 + 0.4 * view.live_count / total
    anonymous = any(s.rank is None and s.pid < 0 for g in view.groups for s in g.states)
    return read * (0.6 if anonymous else 1.0)


def split_point(a: RankState, b: RankState) -> tuple[int, Frame, Frame] | None:
    """Where two user call paths part: the depth and both frames in the function they share."""
    for depth, (fa, fb) in enumerate(zip(a.call_path, b.call_path, strict=False)):
        if (fa.function, fa.file) != (fb.function, fb.file):
            return None
        if fa.line != fb.line:
            return depth, fa, fb
    return None


def past_the_loop(ahead: RankState, behind: RankState) -> bool | None:
    """Did `ahead` leave a loop that `behind` is still in? None when the source is unreadable.

    Where the call paths part inside one function, `ahead` is past the loop when it stands
    later in that function, outside the loop that still holds `behind` there or deeper. It
    is not when either line sits under a rank-dependent branch, or when `ahead` is still in
    an outer loop they share, under an `if` of its own: those are conditional collectives
    (a rank skipped one, or only ranks whose own data said so entered one).
    """
    split = split_point(ahead, behind)
    if split is None:
        return None
    depth, a, b = split
    if a.line is None or b.line is None or not source_available(a.file):
        return None
    left = leaves_loop(b.file, a.line, b.line)
    if left is not None:
        return left
    deeper = behind.call_path[depth + 1 :]
    return any(f.line is not None and innermost_loop(f.file, f.line) for f in deeper)


def branch_of(group: StateGroup, others: list[StateGroup]) -> tuple[Block, Frame] | None:
    """The `if` that sent this group where it is, at its own line or where its call path
    parts from another group's: a rank-dependent one first, else one inside a loop (a
    data-dependent decision each rank takes on its own)."""
    candidates = [group.first.user_frame] if group.first.user_frame else []
    for other in others:
        split = split_point(group.first, other.first)
        if split is not None:
            candidates.append(split[1])
    framed = [f for f in candidates if f.line is not None]
    for frame in framed:
        assert frame.line is not None
        block = rank_condition(frame.file, frame.line)
        if block is not None:
            return block, frame
    for frame in framed:
        assert frame.line is not None
        loop = innermost_loop(frame.file, frame.line)
        block = condition(frame.file, frame.line, within=loop) if loop else None
        if block is not None:
            return block, frame
    return None


def excluding_branch(group: StateGroup) -> tuple[Block, Frame] | None:
    """The `if` inside a loop, around this group's own call, that leaves some ranks out
    (`if not (rank == 2 and step == 3):`): the group waits where most ranks go; the ones
    it left out skipped this call once and went on to the next. (Outside a loop, `if rank
    != 1:` on two ranks reads either way.)"""
    frame = group.first.user_frame
    if frame is None or frame.line is None or innermost_loop(frame.file, frame.line) is None:
        return None
    block = rank_condition(frame.file, frame.line)
    return (block, frame) if block is not None and excludes_ranks(block) else None


def skipped_branch(group: StateGroup, others: list[StateGroup]) -> tuple[Block, Frame] | None:
    """A collective under a rank-dependent `if` in the loop the others still run, which
    this group may have skipped (its own lines are in no branch): the `if` and the call."""
    for other in others:
        split = split_point(group.first, other.first)
        if split is None or split[2].line is None:
            continue
        frame = split[2]
        assert frame.line is not None
        loop = innermost_loop(frame.file, frame.line)
        found = skippable_collective(frame.file, loop, before=frame.line) if loop else None
        if found is not None:
            block, line = found
            return block, Frame(function=frame.function, file=frame.file, line=line)
    return None


#: Why a rank past the loop may have skipped a conditional collective, in every finding.
SKIP_STORY = (
    "A rank for which that test was false on one step skipped the collective, ran out of "
    "collectives one call early and went on; a rank that ran fewer steps "
    "(hang.uneven_inputs) looks the same. Each rank's step count separates the two."
)


def skip_fix(block: Block, file: str) -> str:
    """The fix of a collective that runs only under an `if` that can differ per rank."""
    return (
        f"Every rank must issue the same collectives: `{block.text}` at {file}:{block.start} "
        "can differ per rank, so make its test the same on every rank (all_reduce the flag "
        "first) or run the collective unconditionally."
    )


def or_skipped(block: Block, call: Frame) -> str:
    """The uneven-inputs findings' second reading: one conditional collective skipped."""
    return (
        f" Or as many steps with one collective fewer: the call they wait in, "
        f"{call.file}:{call.line}, runs only under `{block.text}`; a rank for which that test "
        "was false once skipped it and ran out early (hang.mismatched_collective). Each "
        "rank's step count separates the two."
    )


def conditional_wait(waiting: StateGroup, ahead: StateGroup) -> tuple[Block, Frame] | None:
    """The `if` around the collective `waiting` blocks in, below where its path parts from
    `ahead`'s (in the loop there, or in a function called from it: a hook, an autograd
    Function's backward, a helper), whose test may differ per rank: the `if` and the call.

    A rank for which that test was false on one step skipped that collective, ran out of
    collectives one call early and left the loop first: from the stacks alone it looks
    exactly like a rank that ran fewer steps.
    """
    split = split_point(ahead.first, waiting.first)
    if split is None:
        return None
    depth, _, frame = split
    if frame.line is None:
        return None
    loop = innermost_loop(frame.file, frame.line)
    if loop is not None and (block := guard(frame.file, frame.line, loop)) is not None:
        return block, frame
    for deeper in reversed(waiting.first.call_path[depth + 1 :]):
        if deeper.line is None:
            continue
        function = innermost_function(deeper.file, deeper.line)
        if function is not None and (block := guard(deeper.file, deeper.line, function)):
            return block, deeper
    return None


def is_exiting(state: RankState) -> bool:
    return state.activity is RankActivity.exiting


def creation_split(groups: list[StateGroup]) -> tuple[StateGroup, list[StateGroup]] | None:
    """The first group of ranks in a group's creation and the groups standing outside any
    set-up, when there are both: the members wait for ranks that went elsewhere."""
    setup = [g for g in groups if g.creates_group]
    others = [g for g in groups if g.first.activity is not RankActivity.group_setup]
    return (setup[0], others) if setup and others else None
