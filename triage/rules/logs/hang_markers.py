"""hang.unknown from logs: a collective timed out or stalled, and no rule names the cause."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.grouping import latest_stacks
from triage.models import Evidence, Finding
from triage.observations import LogFile, RankActivity
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import stopped_after_setup, stopped_at_init
from triage.rules.logs._signals import Signal, ranks_of, signals, stacks_in_collectives
from triage.text import rank_label


@rule("logs.hang_markers", "hang.unknown")
def hang_markers(evidence: EvidenceSet) -> Iterator[Finding]:
    """The logs show a stalled, timed-out or mismatched collective whose cause no rule names.

    What it detects:
    Generic hang markers: a watchdog's collective operation timeout in any wording (also
    wrapped over lines), `Timeout(ms)=`, ncclCommWatchdog and checkTimeout frames, a
    "Detected mismatch between collectives" report cut short, Horovod's stall inspector.
    Without those, weaker ones (0.15): a process's own print before a collective with no
    print after it, or a stack without an exception that stands inside a collective (a
    dump, or frames pasted from one; native frames waiting in c10d, gloo or NCCL setup),
    or an NCCL_DEBUG=INFO log that says only how NCCL set its communicators up and stops
    a few lines after `Init COMPLETE`, or a log whose last line is a progress bar short of
    its total (the loop stopped between two updates, with no error after it).

    Why it happens:
    Some rank is not where the others are: it skipped or added a collective, runs something
    long on its own, waits on data or I/O, or died. The lines that would say which are not
    in the text (one rank's log only, no DETAIL output, no stacks, no dumps).

    Evidence:
    generic.collective_stall lines, per rank; else hang.progress_print lines and stacks.

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
        yield from _weak_markers(evidence)
        return
    ranks = ranks_of(s for _, s in found)
    who = f" on {rank_label(ranks)}" if ranks else ""
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


def _weak_markers(evidence: EvidenceSet) -> Iterator[Finding]:
    """Text that shows processes stopped (inside collectives, in process-group setup, or
    dumped where they waited) but no timeout: where they stopped."""
    entered = _entered(evidence)
    stacks = [(item, op) for item, _, op in stacks_in_collectives(evidence)]
    native = signals(evidence, "hang.native_wait")
    setup = stopped_after_setup(evidence)
    init = stopped_at_init(evidence)
    elsewhere = [] if stacks else _dumped_elsewhere(evidence)
    progress = _stopped_in_progress(evidence)
    if not (entered or stacks or native or setup or init or elsewhere or progress):
        return
    where = (
        [f"{_writer(s.rank)} printed `{s.text[:100]}` and nothing after it" for _, s in entered][:2]
        + [f"a stack stands in {op}" for _, op in stacks][:2]
        + [f"a native stack waits in {s.fields['frame']}" for _, s in native][:1]
        + [
            f"a log stops right after NCCL set its communicators up (`{s.text[:90]}`)"
            for _, s in setup
        ][:1]
        + [
            f"a log stops right after the process group's setup began (`{s.text[:90]}`),"
            " with no word that every rank joined"
            for _, s in init
        ][:1]
        + [f"a stack dumped while it waited stands in {text}" for _, text in elsewhere][:2]
        + [f"{e.source} stops on a progress bar short of its end (`{bar}`)" for e, bar in progress][
            :2
        ]
    )
    yield Finding(
        title="the job stopped without an error, cause not visible",
        summary=f"No timeout or error line, but {'; '.join(where)}: the job looks hung there,"
        " and no line says which rank was elsewhere or why.",
        ranks=[],
        confidence=0.15,
        evidence=(
            [e.id for e, _ in entered + native + setup + init]
            + [e.id for e, _ in stacks + elsewhere]
            + [e.id for e, _ in progress]
        )[:8],
        fix="Gather what tells the ranks apart while the job hangs: py-spy stacks of every"
        " rank (`triage hang --pids ...`), Flight Recorder dumps, or a rerun with"
        " TORCH_DISTRIBUTED_DEBUG=DETAIL and NCCL_DEBUG=INFO"
        + (
            "; a job that stops in process-group setup waits for ranks that never joined:"
            " check that every node started and reaches MASTER_ADDR:MASTER_PORT."
            if init
            else "."
        ),
        confirm="stacks or dumps of every rank show where each one is",
    )


def _stopped_in_progress(evidence: EvidenceSet) -> list[tuple[Evidence, str]]:
    """Logs whose last line is a progress bar (tqdm's `37%|███▋ | 370/1000 [...]`) short of
    its total: the loop stopped moving between two updates and nothing was printed since,
    no error and no exit."""
    stopped = []
    for item, log in evidence.payloads(LogFile):
        bar = _PROGRESS_BAR.search(log.last_line)
        if bar and int(bar["done"]) < int(bar["total"]):
            stopped.append((item, bar[0].strip()))
    return stopped


#: tqdm's bar as it renders in a log: percent, the bar between pipes, done/total.
_PROGRESS_BAR = re.compile(r"\d{1,3}%\s*\|[^|]{0,120}\|\s*(?P<done>\d+)/(?P<total>\d+)")


def _dumped_elsewhere(evidence: EvidenceSet) -> list[tuple[Evidence, str]]:
    """Stacks a log holds of processes stopped where they waited (a faulthandler or py-spy
    dump, a Ctrl-C's traceback) outside any collective: where the job stood."""
    return [
        (item, f"{state.describe()} at {state.user_frame.file}:{state.user_frame.line}")
        for item, state in latest_stacks(evidence)
        if not item.source.startswith("pid:")
        and state.user_frame is not None
        and state.activity in _WAITING_ELSEWHERE
    ]


#: What a dumped process may be doing when the job it belongs to hangs outside collectives
#: (or in process-group setup).
_WAITING_ELSEWHERE = frozenset(
    {
        RankActivity.data_loading,
        RankActivity.io,
        RankActivity.idle,
        RankActivity.lock,
        RankActivity.compute,
        RankActivity.group_setup,
        RankActivity.debugger,
        RankActivity.gil_held,
    }
)


def _entered(evidence: EvidenceSet) -> list[Signal]:
    """Each writer's last print around each collective, where it is the one before the call."""
    last: dict[tuple[object, ...], Signal] = {}
    for item, sig in sorted(signals(evidence, "hang.progress_print"), key=lambda f: f[1].line):
        last[(sig.path, sig.rank, sig.pid, sig.fields["op"])] = (item, sig)
    return [(e, s) for e, s in last.values() if s.fields.get("entering")]


def _writer(rank: int | None) -> str:
    return f"rank {rank}" if rank is not None else "a process"
