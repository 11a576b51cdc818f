"""hang.unknown from logs, as a last resort: a run's log ends mid-run, with no error and no end."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Evidence, Finding
from triage.observations import LogFile
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import shows_failure

#: A logger's line: a timestamp near its start (ISO, glog's `I1028 12:13:38`, a time of day)
#: or a level word.
_LOGGER_LINE = re.compile(
    r"^.{0,40}?(?:\d{4}-?\d\d-?\d\d[ T_-]\d\d:\d\d|\b[IWE]\d{4} \d\d:\d\d|\b\d\d:\d\d:\d\d)"
    r"|\b(?:INFO|DEBUG|WARN(?:ING)?|NOTICE)\b"
)
#: A last line that says the run or the program came to its end.
_ENDED = re.compile(
    r"(?i)\b(?:finish(?:ed|ing)?|done|complete[ds]?|success(?:ful(?:ly)?)?|succeeded|"
    r"exit(?:ed|ing|s)?|saved|saving|shut(?:ting)? ?down|clos(?:ed|ing)|bye|goodbye|"
    r"total (?:training )?time|elapsed|took|killed|terminat\w*|abort\w*|error|fail\w*)\b"
)


@rule("logs.log_stops", "hang.unknown", without_failure=True)
def log_stops(evidence: EvidenceSet) -> Iterator[Finding]:
    """A run's log ends on an ordinary progress line: no error, no end, nothing after it.

    What it detects:
    A log whose last line is a logger's line (a timestamp or a level word: `2021-11-24
    08:11:55,957 INFO training on multiple gpus`, `[2025-02-22 08:21:43 TP31] Load weight
    end.`), or the `KEY: value` lines of a record such a line opened with a colon (torch's
    `ProcessGroupNCCL initialized with following options:`), that says nothing ended (no
    done, finished, saved, exit, error), in text that shows no failure anywhere.

    Why it happens:
    A job that hangs prints nothing more: its log simply stops at the last thing it did
    before every rank blocked (a collective one rank never joined, a rendezvous, a data
    loader, a lock). Pasted on its own, the last line is where to look.

    Evidence:
    The log and its last line.

    Fix:
    Confirm it is still running and not progressing, then take stacks of every rank while
    it hangs (`triage hang --pids ...`, or py-spy), and rerun with NCCL_DEBUG=INFO and
    TORCH_DISTRIBUTED_DEBUG=DETAIL if the stacks do not show it.

    Known false positives:
    A log pasted only in part, or of a job that went on and ended well after the pasted
    lines; metrics pasted to show wrong results (logs.metrics_only ranks that reading above
    this one). Every other rule's finding outranks this one.

    References:
    https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
    """
    if shows_failure(evidence):
        return
    stopped = [(item, log) for item, log in evidence.payloads(LogFile) if _stops(log)]
    if not stopped:
        return
    item, log = stopped[0]
    yield _finding(item, log, len(stopped))


#: A line that continues a logger's record below it: `KEY: value`, or indented.
_CONTINUES = re.compile(r"^(?:\s+\S|[\w.()/ -]{1,60}:\s*\S)")
#: A record's continuation lines read as part of its last logger line, at most this many.
_RECORD_LINES = 8


def _stops(log: LogFile) -> bool:
    """The log ends on a logger's line, or on the `KEY: value` lines of a record a logger's
    line opened (`ProcessGroupNCCL initialized with following options:`), that say nothing
    ended."""
    tail = [line.strip() for line in (log.tail or [log.last_line]) if line.strip()]
    if not tail:
        return False
    record = [tail[-1]]
    while not _LOGGER_LINE.search(record[0]) and len(record) <= _RECORD_LINES:
        if len(record) == len(tail) or not _CONTINUES.match(record[0]):
            return False
        record.insert(0, tail[-len(record) - 1])
    opened = len(record) == 1 or record[0].endswith(":")
    return (
        opened
        and _LOGGER_LINE.search(record[0]) is not None
        and not any(_ENDED.search(line) for line in record)
    )


def _finding(item: Evidence, log: LogFile, logs: int) -> Finding:
    where = f"{logs} logs end" if logs > 1 else "the log ends"
    return Finding(
        title=f"{where} mid-run with no error: the job may hang there",
        summary=f"{where.capitalize()} on an ordinary progress line (`{log.last_line[:140]}`):"
        " no error, no end of the run, nothing after it. A hung job's log stops like this, at"
        " the last thing it did before every rank blocked.",
        ranks=[],
        confidence=0.1,
        evidence=[item.id],
        fix="Check that the job is still running and not progressing, then take stacks of every"
        " rank while it hangs (`triage hang --pids ...`, or py-spy dump), and rerun with"
        " NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL if the stacks do not show why.",
        confirm="the processes are alive, use no CPU or GPU time, and print nothing more",
    )
