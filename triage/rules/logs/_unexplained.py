"""The last resort's reading: the text's first failure that no rule names, and the family
its own words point to.

An exception or a failure line that no signature reads still says which kind of failure it
is, in generic words: a socket, a connection or a communication library is a transport's
failure; a timeout or a wait that never ended is a hang; memory or an allocation is an
OOM. Everything else (sizes, shapes, devices, arguments, files) is most often the job's
code and its setup disagreeing. One rule per family reads this (logs.unexplained_*), so a
report says "a communication failure, cause not visible" instead of a setup guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from triage.models import Evidence, Finding, Location
from triage.registry import EvidenceSet
from triage.rules.logs._signals import (
    exception_line,
    first_exception,
    ranks_of,
    shows_failure,
    signals,
    tracebacks,
)

#: A line in plain failure words counts only where no other line shows the failure.
_PLAIN = frozenset({"generic.failure_words"})

#: The family a failure's words point to, the first that matches: a transport's words first
#: (a socket that timed out is the transport's; shared memory is /dev/shm), then a wait,
#: then memory.
_FAMILIES = (
    (
        "comm",
        re.compile(
            r"(?i)socket|connect|transport|nccl|gloo|hccl|rccl|\bccl|\bmpi|rendezvous|\bpeers?\b|"
            r"network|\bnic\b|\bib\b|ibv|rdma|\bqp\b|fabric|handshake|\bofi\b|\befa\b|broken pipe|"
            # shared memory is /dev/shm, which NCCL and the data loader's workers pass data in
            r"shared memory|/dev/shm|\bshm\b"
        ),
    ),
    (
        "hang",
        re.compile(
            r"(?i)time[sd]? ?out|timeout|deadline|stuck|\bstall(?:ed|s|ing)?\b|did not return|"
            r"not responding|\bhang|\bhung"
        ),
    ),
    ("oom", re.compile(r"(?i)memory|\boom\b|alloc|RESOURCE_EXHAUSTED")),
)

#: Exceptions whose type says the family, whatever their message's words: a missing module,
#: key, file or attribute is the setup's, however often it names NCCL or MPI.
_TYPES = (
    (
        "config",
        re.compile(
            r"^(?:\w+\.)*(?:Import|ModuleNotFound|Key|FileNotFound|Attribute|Name|Type)Error\b"
        ),
    ),
    ("hang", re.compile(r"^(?:\w+\.)*\w*Timeout(?:Error|Exception)?\b")),
    ("comm", re.compile(r"^(?:\w+\.)*(?:Connection\w*|BrokenPipe)Error\b")),
)


#: A failure named only by these lines' own words, exception or not, is this confident: the
#: family is a guess from generic words. A line without an exception is weaker still.
EXCEPTION_CONFIDENCE = 0.12
LINE_CONFIDENCE = 0.08


@dataclass(frozen=True)
class Unexplained:
    """The first failure no rule names: what the text shows, where, and its family."""

    family: str
    seen: str
    exception: str | None
    item: Evidence
    ranks: list[int]
    location: Location | None
    confidence: float


def _family_of(text: str) -> str:
    """The family a failure's words point to (an exception's type first); `config` when
    they point to none."""
    for family, words in (*_TYPES, *_FAMILIES):
        if words.search(text):
            return family
    return "config"


def unexplained(evidence: EvidenceSet) -> Unexplained | None:
    """The text's first exception; without one, a traceback cut before its exception line,
    an error line, or a line that says something failed (in that order); None when the
    text shows no failure."""
    return evidence.derived("unexplained", lambda: _first_failure(evidence))


def _first_failure(evidence: EvidenceSet) -> Unexplained | None:
    found = first_exception(evidence)
    if found is not None:
        item, first = found
        text, where = exception_line(first)
        frame = first.user_frame
        return Unexplained(
            family=_family_of(text),
            seen=f"`{text[:200]}`{where}",
            exception=text,
            item=item,
            ranks=ranks_of([first]),
            location=frame.location() if frame else None,
            confidence=EXCEPTION_CONFIDENCE,
        )
    cut = [(e, t) for e, t in tracebacks(evidence, dumps=False) if not t.exception and t.frames]
    if cut:
        item, record = min(cut, key=lambda found: (found[1].path, found[1].line))
        frame = record.user_frame or record.frames[0]
        which = "user frame" if record.user_frame else "frame"
        return Unexplained(
            family="config",
            seen=f"a traceback cut before its exception line, its innermost {which} at"
            f" {frame.file}:{frame.line}",
            exception=None,
            item=item,
            ranks=ranks_of([record]),
            location=frame.location(),
            confidence=LINE_CONFIDENCE,
        )
    for name, what in (
        ("generic.error_line", "an error line no rule reads"),
        ("generic.failure_words", "a line that says something failed, which no rule reads"),
    ):
        if name == "generic.failure_words" and shows_failure(evidence, besides=_PLAIN):
            break  # another line shows the failure (`Aborted (core dumped)`: a crash)
        lines = signals(evidence, name)
        if lines:
            item, line = lines[0]
            text = line.text.strip()
            return Unexplained(
                family=_family_of(text),
                seen=f"{what}: `{text[:160]}`",
                exception=None,
                item=item,
                ranks=ranks_of([line]),
                location=None,
                confidence=LINE_CONFIDENCE,
            )
    return None


@dataclass(frozen=True)
class _Words:
    """How a family's last-resort finding reads: its title, what the failure's words say,
    the next step and what would confirm it."""

    title: str
    means: str
    fix: str
    confirm: str


_WORDS = {
    "config": _Words(
        title="an exception stopped the job",
        means="no rule names its cause, so the kind of failure is a guess: the job's code and"
        " its setup disagree, or (the other reading) a bug of the code that only stopped this"
        " rank",
        fix="Read the exception at its user frame against the launch: the world size, the"
        " devices per node, the sizes a checkpoint or mesh was made for; rerun with"
        " TORCH_DISTRIBUTED_DEBUG=DETAIL and every rank's log.",
        confirm="the exception names a size, device, variable or argument the launch sets",
    ),
    "comm": _Words(
        title="a communication failure, cause not visible",
        means="its words are a transport's (a socket, a connection, a communication library),"
        " and no line says why it failed",
        fix="Rerun with NCCL_DEBUG=INFO, TORCH_CPP_LOG_LEVEL=INFO and"
        " TORCH_DISTRIBUTED_DEBUG=DETAIL and collect every rank's log: the first WARN or error"
        " before this line names the failing call; check that every node reaches the others'"
        " address and port on the interface it uses.",
        confirm="the first failing rank's log names a socket, an interface, a port or a"
        " transport that failed",
    ),
    "hang": _Words(
        title="a wait timed out, cause not visible",
        means="its words say a wait did not end in time: some process did not reach where"
        " the others wait, and no line says which or why",
        fix="Gather what tells the processes apart: every rank's log, py-spy stacks of the"
        " live ranks (`triage hang --pids ...`), Flight Recorder dumps, or a rerun with"
        " TORCH_DISTRIBUTED_DEBUG=DETAIL.",
        confirm="stacks or logs of every rank show one of them elsewhere",
    ),
    "oom": _Words(
        title="memory ran short, cause not visible",
        means="its words are about memory or an allocation, and no line says how much was"
        " asked for, how much was free, or on which device",
        fix="Read the memory at the failure: torch.cuda.memory_summary() on the failing rank,"
        " nvidia-smi of every GPU, and the kernel log (`dmesg`) for the OOM killer; then run"
        " triage on those.",
        confirm="the memory summary or the kernel log shows what held the memory",
    ),
}


#: A failure without its exception, in words of no other family: the exception is the
#: next thing to find.
_CUT = _Words(
    title="a failure without its exception, cause not visible",
    means="the exception that would name the failure is not in it, so the kind of failure is"
    " a guess",
    fix="Find the exception: the lines after this one in the rank's own log (the traceback"
    " ends with the exception's type and message), or every rank's log; then run triage on"
    " that.",
    confirm="the rank's full log holds an exception that names a size, device, variable or"
    " argument the launch sets",
)


def last_resort(evidence: EvidenceSet, family: str) -> Finding | None:
    """The last-resort finding of `family` (config, comm, hang or oom): the first failure
    no rule names, when its words point to that family."""
    failure = unexplained(evidence)
    if failure is None or failure.family != family:
        return None
    words = _CUT if family == "config" and failure.exception is None else _WORDS[family]
    quoted = f": {failure.exception[:120]}" if failure.exception else ""
    return Finding(
        title=f"{words.title}{quoted}",
        summary=f"The text shows {failure.seen}; {words.means}.",
        ranks=failure.ranks,
        location=failure.location,
        confidence=failure.confidence,
        evidence=[failure.item.id],
        fix=words.fix,
        confirm=words.confirm,
    )
