"""hang.shape_mismatch from stacks and source: one collective, an input some ranks reshape."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding, Location
from triage.readers.source import reshaped_input
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import coverage_factor, hang_view


@rule("stacks.shape_mismatch", "hang.shape_mismatch")
def shape_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Every rank waits in the same collective, whose input a rank-dependent branch changes.

    What it detects:
    All live ranks block in one collective from one line, and the source shows an `if` on
    the rank above that call (in the same function, not around it) that assigns or grows a
    variable the call's arguments read: `if rank == 0: metrics.append(extra)` before
    `dist.all_reduce(torch.tensor(metrics))`.

    Why it happens:
    The ranks that take the branch pass a tensor of another size or dtype. Gloo and NCCL
    then wait for bytes that never come (or read garbage); stacks look the same on every
    rank because every rank is in the right call.

    Evidence:
    py-spy stacks identical across ranks, plus the user's source: the `if` and the
    statement in it that changes the call's input.

    Fix:
    Give every rank a tensor of the same shape and dtype: pad to a fixed size, or exchange
    sizes first (all_gather_object, all_gather of the lengths) and use the variable-size
    collectives.

    Known false positives:
    A branch whose change keeps the size (a value, not a length); the stall is then below
    Python and stacks.no_culprit_visible says so, ranked close. TORCH_DISTRIBUTED_DEBUG=DETAIL
    or Flight Recorder dumps show the sizes and confirm.

    References:
    TORCH_DISTRIBUTED_DEBUG=DETAIL (collective fingerprints with shapes); Flight Recorder.
    """
    view = hang_view(evidence)
    if len(view.groups) != 1 or view.missing or len(view.groups[0].states) < 2:
        return
    group = view.groups[0]
    frame = group.first.user_frame
    if not group.waits or frame is None or frame.line is None:
        return
    found = reshaped_call(frame.location())
    if found is None:
        return
    because, fix, changed = found
    yield Finding(
        title=f"every rank waits in the same {group.first.op or 'collective'}, whose input some ranks change",
        summary=f"All {len(group.states)} inspected ranks wait in {group.where()}. {because}",
        ranks=[],
        location=frame.location(),
        other_locations=[changed],
        confidence=round(0.55 * coverage_factor(view), 3),
        evidence=group.evidence[:4],
        fix=fix,
        confirm=(
            "TORCH_DISTRIBUTED_DEBUG=DETAIL or Flight Recorder dumps show the ranks' sizes "
            "differ in this collective"
        ),
    )


def reshaped_call(call: Location) -> tuple[str, str, Location] | None:
    """Why the collective at `call` gets other sizes on some ranks, the fix, and the line
    that changes its input: read from the source (see readers.source.reshaped_input)."""
    found = reshaped_input(call.file, call.line) if call.line is not None else None
    if found is None:
        return None
    block, changed = found
    because = (
        f"Above it, `{block.text}` ({call.file}:{block.start}) changes the call's input at "
        f"line {changed}: the ranks that take that branch pass a tensor of another size or "
        "dtype, and the collective never completes."
    )
    fix = (
        f"Give every rank the same shape and dtype at {call.file}:{call.line}: pad to a fixed "
        "size, or exchange the sizes first and use the variable-size collectives; "
        f"`{block.text}` must not change the collective's input on some ranks only."
    )
    return because, fix, Location(file=call.file, line=changed)
