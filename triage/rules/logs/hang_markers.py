"""hang.unknown from logs: a collective timed out or stalled, and no rule names the cause."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, signals
from triage.text import format_ranks


@rule("logs.hang_markers", "hang.unknown")
def hang_markers(evidence: EvidenceSet) -> Iterator[Finding]:
    """The logs show a stalled, timed-out or mismatched collective whose cause no rule names.

    What it detects:
    Generic hang markers: a watchdog's collective operation timeout in any wording (also
    wrapped over lines), `Timeout(ms)=`, ncclCommWatchdog and checkTimeout frames, a
    "Detected mismatch between collectives" report cut short, Horovod's stall inspector.

    Why it happens:
    Some rank is not where the others are: it skipped or added a collective, runs something
    long on its own, waits on data or I/O, or died. The lines that would say which are not
    in the text (one rank's log only, no DETAIL output, no stacks, no dumps).

    Evidence:
    generic.collective_stall lines, per rank.

    Fix:
    Gather what tells the ranks apart: every rank's log, py-spy stacks of the live ranks
    (`triage hang --pids ...`), Flight Recorder dumps (TORCH_FR_BUFFER_SIZE, dump on
    timeout), or a rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL.

    Known false positives:
    None as such: it is the honest 'hung, cause not visible' answer; a rule that names the
    cause outranks it, and the engine drops it then.

    References:
    https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
    """
    found = signals(evidence, "generic.collective_stall")
    if not found:
        return
    ranks = ranks_of(s for _, s in found)
    who = f" on rank {format_ranks(ranks)}" if ranks else ""
    yield Finding(
        title=f"a collective stalled or timed out{who}, cause not visible",
        summary=f"The logs show a stalled collective{who} (`{found[0][1].text[:160]}`), and no"
        " line says which rank was elsewhere or why.",
        ranks=[],
        confidence=0.2,
        evidence=[e.id for e, _ in found][:8],
        fix="Gather what tells the ranks apart: every rank's log, py-spy stacks of the live"
        " ranks (`triage hang --pids ...`), Flight Recorder dumps, or a rerun with"
        " TORCH_DISTRIBUTED_DEBUG=DETAIL.",
        confirm="stacks or dumps of every rank show where each one is",
    )
