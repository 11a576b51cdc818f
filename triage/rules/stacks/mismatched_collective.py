"""hang.mismatched_collective from stacks: ranks block in different collectives."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import Frame, RankActivity
from triage.readers.source import (
    Block,
    excludes_ranks,
    innermost_loop,
    is_rank_dependent,
)
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import (
    SKIP_STORY,
    HangView,
    StateGroup,
    branch_of,
    conditional_wait,
    coverage_factor,
    excluding_branch,
    hang_view,
    past_the_loop,
    skip_fix,
    skipped_branch,
    split_point,
)


@rule("stacks.mismatched_collective", "hang.mismatched_collective")
def mismatched_collective(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks wait in different collectives, or in the same op from different lines.

    What it detects:
    Two or more groups of ranks blocked in collectives whose op or user call site differ,
    on the same process group, with none past the training loop.

    Why it happens:
    A collective under a rank-dependent branch (`if rank == 0: dist.broadcast(...)`),
    collectives issued in a different order on different ranks (dict/set iteration,
    data-dependent control flow), or an exception handler that skips one.

    Evidence:
    py-spy stacks: the op frame in torch/distributed/distributed_c10d.py and the user
    frame that called it differ across groups; the source shows the rank-dependent `if`
    around the minority's line when the file is readable.

    Fix:
    Every rank must issue the same collectives in the same order: hoist the collective out
    of the rank-dependent branch (compute on all ranks, use the result on one), or make the
    branch condition identical on all ranks.

    Known false positives:
    Two dumps taken while ranks are still progressing can differ by one step; a real hang
    keeps the same lines on a second dump. Ranks past the loop are reported as
    hang.uneven_inputs instead.

    References:
    TORCH_DISTRIBUTED_DEBUG=DETAIL reports collective fingerprint mismatches at the call.
    """
    view = hang_view(evidence)
    blocked = [g for g in view.waiting if g.first.activity is RankActivity.collective]
    # A group known on one side only (DTensor's mesh, an opaque ProcessGroup) may be the same.
    if len(blocked) < 2 or len({g.first.group for g in blocked} - {None}) > 1:
        return
    majority = max(blocked, key=lambda g: len(g.states))
    others = [g for g in blocked if g is not majority]
    excluded = _left_out(blocked)
    if excluded is not None:
        waiting, block, frame, done = excluded
        sure = len(done) == 1 and len(blocked) == 2
        yield _skip(view, waiting, block, frame, done, 0.85 if sure else 0.6)
        return
    ahead = [g for g in others if past_the_loop(g.first, majority.first)]
    if ahead or any(past_the_loop(majority.first, g.first) for g in others):
        done = ahead or [majority]
        running = [g for g in blocked if g not in done]
        skipped = next(
            ((g, skip) for g in running for d in done if (skip := conditional_wait(g, d))), None
        )
        if skipped is not None:
            at, (guard, call) = skipped
            yield _skip(view, at, guard, call, done, 0.6)
        return
    culprit = _culprit(majority, others)
    rest = [g for g in blocked if g is not culprit]
    own = branch_of(culprit, rest) or next(
        (found for g in rest if (found := branch_of(g, [culprit]))), None
    )
    branch = own or skipped_branch(culprit, rest)
    same_op = {g.first.op for g in blocked}
    how = (
        f"the same op ({culprit.first.op}) from different lines"
        if len(same_op) == 1
        else "different collectives"
    )
    others_text = "; ".join(f"{g.label} in {g.where()}" for g in rest[:3])
    even = all(len(g.states) == len(culprit.states) for g in rest)
    if branch is None and even:
        sides = " and ".join(g.label for g in blocked[:3])
        yield Finding(
            title=f"ranks split evenly between collectives ({sides}): no majority shows the odd side",
            summary=f"Ranks block in {how}: {culprit.label} in {culprit.where()}, while"
            f" {others_text}. As many ranks stand on each side, so the stacks do not tell which"
            " side skipped or added a collective.",
            ranks=sorted(r for g in blocked for r in g.ranks),
            location=culprit.location,
            other_locations=[g.location for g in rest if g.location],
            confidence=round(0.6 * coverage_factor(view), 3),
            evidence=[e for g in blocked for e in g.evidence[:3]],
            fix="Every rank must issue the same collectives in the same order: find the branch"
            " or early exit that leads to one of these lines on some ranks only.",
            confirm="TORCH_DISTRIBUTED_DEBUG=DETAIL names each rank's collective at the"
            " mismatch; Flight Recorder dumps show which side is a collective ahead",
        )
        return
    because, fix_branch = "", "hoist the collective out of any rank-dependent branch"
    location, confidence = culprit.location, 0.8
    if branch:
        block, frame = branch
        because = f" {frame.file}:{frame.line} sits under `{block.text}` (line {block.start})."
        location = frame.location()
        if own is None and even:  # a tie read by the call the side ahead may have skipped
            confidence = 0.6
            because += f" {SKIP_STORY}"
            fix_branch = (
                skip_fix(block, frame.file)
                .removeprefix("Every rank must issue the same collectives: ")
                .removesuffix(".")
            )
        elif is_rank_dependent(block):
            confidence = 0.92
            fix_branch = (
                f"`{block.text}` at {frame.file}:{block.start} decides per rank which collective"
                " runs: move the collective out of it, or make the condition the same on every rank"
            )
        else:
            confidence = 0.85
            fix_branch = (
                f"`{block.text}` at {frame.file}:{block.start} is decided by each rank on its own"
                " data, so ranks take different paths: decide on a value every rank agrees on"
                " (all_reduce it first) or run the collective on every rank"
            )
    yield Finding(
        title=f"{culprit.label} {'blocks' if len(culprit.states) == 1 else 'block'} in a different collective than the other ranks",
        summary=f"Ranks block in {how}: {culprit.label} in {culprit.where()}, while {others_text}.{because}",
        ranks=culprit.ranks,
        location=location,
        other_locations=[g.location for g in blocked if g.location and g.location != location],
        confidence=round(confidence * coverage_factor(view), 3),
        evidence=[e for g in blocked for e in g.evidence[:3]],
        fix=f"Every rank must issue the same collectives in the same order: {fix_branch}.",
    )


def _left_out(
    blocked: list[StateGroup],
) -> tuple[StateGroup, Block, Frame, list[StateGroup]] | None:
    """Ranks waiting in a collective under an `if` that leaves some ranks out (`if not
    (rank == 2 and step == 3):`), and the ranks at later calls: those the test left out,
    which went on to their next collective: here, those already past the loop. (Without a
    loop, `if rank != 1:` on two ranks reads either way; the other paths decide it.)"""
    for waiting in blocked:
        found = excluding_branch(waiting)
        if found is None:
            continue
        block, frame = found
        loop = innermost_loop(frame.file, frame.line or 0)
        past = [
            g
            for g in blocked
            if g is not waiting
            and (split := split_point(g.first, waiting.first)) is not None
            and (at := split[1].line) is not None
            and at > (split[2].line or 0)
            and loop is not None
            and not loop.start <= at <= loop.end
        ]
        if past:
            return waiting, block, frame, past
    return None


def _skip(
    view: HangView,
    waiting: StateGroup,
    block: Block,
    frame: Frame,
    done: list[StateGroup],
    confidence: float,
) -> Finding:
    """The finished ranks skipped, once, the collective the others wait in under `block`
    (or ran fewer steps: stacks.uneven_inputs says so, ranked below). On a subgroup (one
    dimension of a mesh) only the waiters' own partners could have, and the stacks do not
    say which those are."""
    finished = StateGroup(
        [s for g in done for s in g.states], [e for g in done for e in g.evidence]
    )
    return Finding(
        title=(
            f"{finished.label} may have skipped the collective {waiting.label} "
            f"{waiting.verb('wait')} in"
        ),
        summary=(
            f"{waiting.label.capitalize()} {waiting.verb('wait')} in {waiting.where()}, "
            f"a call that runs only under `{block.text}` (line {block.start}), while "
            f"{finished.label} already {finished.verb('stand')} at a later call, "
            f"{done[0].where()}. {SKIP_STORY}"
        ),
        ranks=finished.ranks,
        location=frame.location(),
        other_locations=[g.location for g in done if g.location],
        confidence=round(confidence * coverage_factor(view), 3),
        evidence=finished.evidence[:3] + waiting.evidence[:3],
        fix=skip_fix(block, frame.file),
        confirm=(
            f"{finished.label} logged as many steps as the others (a skip), not fewer (uneven "
            "inputs); TORCH_DISTRIBUTED_DEBUG=DETAIL names the collective each rank entered"
        ),
    )


def _culprit(majority: StateGroup, others: list[StateGroup]) -> StateGroup:
    """The minority; among equals, the group whose call sits under a rank-dependent `if`,
    else the group that may have skipped one the others still wait behind (it ran ahead)."""
    candidates = (
        [majority, *others]
        if all(len(g.states) == len(majority.states) for g in others)
        else others
    )
    groups = [majority, *others]
    found = [(g, b) for g in candidates if (b := branch_of(g, [x for x in groups if x is not g]))]
    # Of an `if rank == 0: ... else: ...`, the ranks the test picks out are the odd ones.
    picked = [g for g, (block, _) in found if not excludes_ranks(block)]
    ahead = [g for g in candidates if skipped_branch(g, [x for x in groups if x is not g])]
    pool = picked or [g for g, _ in found] or ahead or candidates
    return min(pool, key=lambda g: (len(g.states), g.ranks))
