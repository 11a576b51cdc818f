"""Multi-line blocks in logs: tracebacks, stack dumps and launcher failure reports.

Python tracebacks, faulthandler and py-spy dumps, torch's stack of a failed collective,
torchelastic's failure report and torch.cuda.memory_summary() tables each span many lines;
lines of several writers (ranks) may interleave, so one block stays open per writer
(`Origin`). The scanner feeds the lines around each block anchor, in order; a gap in the
line numbers closes every open block.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Protocol

from triage.observations import Frame, TracebackRecord
from triage.readers.log_prefilter import MAX_LINE
from triage.readers.signatures.blocks import (
    EXCEPTION_ANCHORS,
    FAILED_COLLECTIVE_START,
    RICH_TRACEBACK_START,
    TRACEBACK_START,
    TRACEBACK_WORDS,
)
from triage.readers.signatures.memory import SUMMARY_TITLE, SummaryTable
from triage.readers.signatures.metric_table import ANCHORS as TABLE_ANCHORS
from triage.readers.signatures.metric_table import HEADER as TABLE_HEADER
from triage.readers.signatures.metric_table import GpuTable
from triage.readers.stacks import is_user_code

#: The same traceback (writer, exception, frames) is kept this many times: a traceback
#: repeated every step reads as one.
SAME_BLOCK_KEPT = 3

_TB_START = TRACEBACK_START
_QUALIFIED = r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*"  # torch.distributed.DistBackendError
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_FH_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
_FH_START = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):")
_PYSPY_THREAD = re.compile(
    r'^Thread (?P<tid>\d+|0x[0-9A-Fa-f]+) \((?:idle|active)[^)]*\)(?:: "(?P<name>[^"]*)"|\s*$)'
)
_PYSPY_PROCESS = re.compile(r"^Process (?P<pid>\d+): ")
_PYSPY_PYTHON = re.compile(r"^Python v\d+\.\d+")
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>[^\s(][^(]*?) \((?P<file>[^():]+):(?P<line>\d+)\)\s*$")
_FR_START = FAILED_COLLECTIVE_START
#: rich's boxed traceback (`rich.traceback`, which DeepSpeed-Chat, typer and other CLIs
#: install): a header box line, frames as `path:line in func` (a long path cut at the
#: box's width, its start on the line before), source excerpts between them, the
#: exception under the box.
_RICH_START = RICH_TRACEBACK_START
_RICH_FRAME = re.compile(r"^(?P<file>[^\s│]*?):(?P<line>\d+) in (?P<func>\S+)$")
_RICH_PATH = re.compile(r"^[/~][^\s│]*$")
_RICH_TOKEN = re.compile(r"^[^\s│]+$")
_FR_FRAME = re.compile(r"^#\d+ (?P<func>\S.*?) from (?P<file>.+):(?P<line>\d+)$")
#: IPython's traceback (a notebook, `ipython script.py`): `RuntimeError    Traceback (most
#: recent call last)` above its frames, each followed by numbered source lines with an arrow
#: at the line that ran; `File PATH:LINE, in FUNC(ARGS)` (IPython 8), `Cell In[N], line L`
#: for a notebook cell, `PATH in FUNC(ARGS)` with the line on its arrow (IPython 7).
_IPY_START = re.compile(rf"^(?P<type>{_QUALIFIED})\s{{2,}}{re.escape(TRACEBACK_WORDS)}\s*$")
_IPY_FRAME = re.compile(r"^File (?P<file>\S+?):(?P<line>\d+)(?:, in (?P<func>[^\s(]+)|\s*$)")
_IPY_CELL = re.compile(
    r"^(?:Cell In ?\[(?P<cell>\d*)\], line (?P<line>\d+)|Input In \[(?P<input>\d*)\])"
)
_IPY7_FRAME = re.compile(
    r"^(?P<file>(?:/|~|[A-Za-z]:\\)\S*\.py|<ipython-input-[\w-]+>) in (?P<func>[^\s(]+)"
)
_IPY_ARROW = re.compile(r"^-*> ?(?P<line>\d+)\b")
_IPY_CONTEXT = re.compile(r"^(?:\d+\b|\.\.\.|-+$|$)")
_REPORT_ENTRY = re.compile(r"^\[\d+\]:\s*$")
_REPORT_FIELD = re.compile(r"^\s+(?P<key>[a-z_]+)\s*:\s?(?P<value>.*)$")
#: pytest marks the lines of a failure's exception with `E` and spaces (`E       RuntimeError:
#: ...`): a test run's output pasted into a report.
_PYTEST_MARK = r"(?:E {2,})?"
_EXC_LINE = re.compile(
    rf"^{_PYTEST_MARK}(?P<type>{_QUALIFIED}(?:Error|Exception|Interrupt|Exit|Warning|Failure))"
    r"(?::\s?(?P<msg>.*))?$"
)
#: An exception line with no traceback above it, as a report pastes a traceback's last
#: line: errors only (a bare `UserWarning:` line is no failure, `KeyboardInterrupt` a stop).
_BARE_EXC = re.compile(
    rf"^{_PYTEST_MARK}(?P<type>{_QUALIFIED}(?:Error|Exception)): ?(?P<msg>\S.*)$"
)
#: Text without which a line opens no block: with nothing open, it is skipped at once (a log
#: of a million WARN lines pays one search a line, not every block pattern).
_MAY_OPEN = re.compile(
    "|".join(
        re.escape(text)
        for text in (
            TRACEBACK_WORDS,
            _RICH_START,
            "│",
            "most recent call first",
            "Thread ",
            "Current thread",
            "Process ",
            'File "',
            "File /",
            ".py in ",
            "<ipython-input-",
            "Failures:",
            "Root Cause (first observed failure):",
            _FR_START,
            SUMMARY_TITLE,
            *TABLE_ANCHORS,
            *EXCEPTION_ANCHORS,
        )
    )
)


class JoinedTable(Protocol):
    """A table read row by row and joined into one line (`SummaryTable`, `GpuTable`)."""

    done: bool

    def feed(self, line: str) -> bool: ...

    def text(self) -> str | None: ...


def _open_table(text: str) -> JoinedTable | None:
    """The table a line opens, if it is a joined table's header."""
    if SUMMARY_TITLE in text:
        return SummaryTable(text)
    if TABLE_HEADER.match(text.strip()):
        return GpuTable(text)
    return None


@dataclass
class Origin:
    """Who wrote a line: what its prefixes and its file say."""

    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    device: int | None = None

    def key(self) -> tuple[object, ...]:
        return (self.rank, self.local_rank, self.host, self.pid)


class BlockParser:
    """Tracebacks and stack dumps, one open block per writer (interleaved ranks stay apart)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.open: dict[tuple[object, ...], _Block] = {}
        self.records: list[TracebackRecord] = []
        self.pyspy_pid: int | None = None
        self.pyspy_header: int | None = None
        self.joined: list[tuple[int, str, Origin]] = []
        self.seen: dict[tuple[object, ...], int] = {}
        self.fr_key: tuple[object, ...] | None = None
        self.report: tuple[int, list[str], Origin] | None = None
        self.report_section = ""
        #: Per writer, the table being joined into one line: where it began, its writer.
        self.tables: dict[tuple[object, ...], tuple[int, Origin, JoinedTable]] = {}
        #: The line where the faulthandler dump being read began: its threads are one process.
        self.fh_dump: int | None = None

    def reset(self) -> None:
        self.fh_dump = None
        for key in list(self.tables):
            self._close_table(key)
        self.pyspy_header = None
        for key in list(self.open):
            self._close(key)
        self._close_report()
        self.report_section = ""

    def feed(self, number: int, text: str, origin: Origin) -> None:
        if self.fh_dump is not None and not _in_fh_dump(text):
            self.fh_dump = None
        idle = not (self.open or self.tables or self.report_section)
        if idle and self.pyspy_header is None and not _MAY_OPEN.search(text):
            return
        if self._feed_table(number, text, origin):
            return
        if self._feed_report(number, text, origin):
            return
        key = origin.key()
        block = self.open.get(key)
        stripped = text.strip()
        if _FR_START in stripped:
            self._close(key)
            self.open[key] = _Block("fr", number, origin, origin.pid, message=_FR_START[:-1])
            self.fr_key = key
            return
        collective_frame = _FR_FRAME.match(stripped)
        if collective_frame and self.fr_key in self.open:
            # torch prints the frames without the rank prefix of the line announcing them
            frame_of = collective_frame
            self.open[self.fr_key].frames.append(
                Frame(function=frame_of["func"], file=frame_of["file"], line=int(frame_of["line"]))
            )
            return
        if _RICH_START in stripped:
            self._close(key)
            self.open[key] = _Block("tb", number, origin, origin.pid, boxed=True)
            return
        ipython = _IPY_START.match(stripped)
        if ipython or (
            block is None and (_IPY_FRAME.match(stripped) or _IPY7_FRAME.match(stripped))
        ):
            # a header opens one; a frame without it, an excerpt pasted from the middle
            self._close(key)
            block = self.open[key] = _Block("tb", number, origin, origin.pid, ipython=True)
            if ipython:
                return
        if block is not None and block.ipython:
            if self._feed_ipython(key, block, stripped):
                return
            block = None  # the traceback is over: the line is read as any other
        if block is None and _rich_frame_line(stripped):  # a box pasted without its top
            block = self.open[key] = _Block("tb", number, origin, origin.pid, boxed=True)
        if block is not None and (block.boxed or block.rich_ended):
            if self._feed_rich(key, block, stripped):
                return
            block = None  # the box is over: the line is read as any other
        header, self.pyspy_header = self.pyspy_header, None
        process = _PYSPY_PROCESS.match(stripped)
        if process:
            self.pyspy_header = int(process.group("pid"))
            return
        if header is not None and _PYSPY_PYTHON.match(stripped):
            self.pyspy_pid = header  # the process every thread dump below belongs to
            return
        if (
            stripped.startswith(_TB_START)
            or _FH_START.match(stripped)
            or _PYSPY_THREAD.match(stripped)
        ):
            self._close(key)
            style = (
                "tb"
                if stripped.startswith(_TB_START)
                else "fh"
                if _FH_START.match(stripped)
                else "pyspy"
            )
            pid = origin.pid if origin.pid is not None else self._pyspy_pid(stripped, style)
            if style == "fh" and pid is None and origin.rank is None:
                self.fh_dump = number if self.fh_dump is None else self.fh_dump
                pid = placeholder_pid(self.path, self.fh_dump)
            self.open[key] = _Block(style, number, origin, pid)
            return
        frame = _TB_FRAME.match(text) or _FH_FRAME.match(text)
        if block is None:
            if frame:  # frames without a header: a pasted excerpt of a traceback or dump
                style = "tb" if _TB_FRAME.match(text) else "fh"
                block = self.open[key] = _Block(style, number, origin, origin.pid, excerpt=True)
            else:
                self._bare_exception(number, stripped, origin)
                return
        if block.style == "pyspy":
            spy = _PYSPY_FRAME.match(text)
            if spy:
                block.frames.append(
                    Frame(function=spy["func"], file=spy["file"], line=int(spy["line"]))
                )
            elif stripped and not text[:1].isspace():  # `--locals` lines are indented
                self._close(key)
            return
        if frame:
            block.frames.append(
                Frame(function=frame["func"], file=frame["file"], line=int(frame["line"]))
            )
            return
        if block.style == "tb":
            # The exception line ends a traceback; it is indented when a launcher report
            # quotes the traceback. Any other unindented line ends it without a message.
            exc = _EXC_LINE.match(stripped)
            if exc:
                block.exception, block.message = exc["type"], (exc["msg"] or "").strip()
                self._close(key)
            elif block.frames and (
                (stripped and not text[:1].isspace()) or (block.excerpt and not stripped)
            ):
                # a blank line parts pasted excerpts (one per rank); a whole traceback may
                # hold blank lines (loguru's), and its exception line ends it
                self._close(key)
            return
        if stripped and not text[:1].isspace():
            self._close(key)

    def _feed_rich(self, key: tuple[object, ...], block: _Block, stripped: str) -> bool:
        """One line of a rich traceback: a frame inside the box, the box's end, or the
        exception line under it; False when the line is none of those (the block is closed
        then, and the line is read as any other)."""
        if block.rich_ended:
            exc = _EXC_LINE.match(stripped)
            if exc:
                block.exception, block.message = exc["type"], (exc["msg"] or "").strip()
            self._close(key)
            return exc is not None
        if stripped.startswith("╰"):
            block.boxed, block.rich_ended = False, True
            return True
        if not stripped.startswith("│"):  # a box cut short, or a table that only looked like one
            self._close(key)
            return False
        inner = _box_inner(stripped)
        frame = _RICH_FRAME.match(block.wrapped_path + inner)
        if frame:
            block.wrapped_path = ""
            if frame["file"]:
                block.frames.append(
                    Frame(function=frame["func"], file=frame["file"], line=int(frame["line"]))
                )
        elif _RICH_PATH.match(inner) or (block.wrapped_path and _RICH_TOKEN.match(inner)):
            block.wrapped_path += inner
        else:
            block.wrapped_path = ""
        return True

    def _feed_ipython(self, key: tuple[object, ...], block: _Block, stripped: str) -> bool:
        """One line of an IPython traceback: a frame, its numbered source, or the exception
        that ends it; False when the line is none of those (the block is closed then)."""
        arrow = _IPY_ARROW.match(stripped)
        if frame := _IPY_FRAME.match(stripped) or _IPY7_FRAME.match(stripped):
            line = int(frame["line"]) if "line" in frame.groupdict() else 0
            function = frame["func"] or "<module>"
            block.frames.append(Frame(function=function, file=frame["file"], line=line))
        elif cell := _IPY_CELL.match(stripped):
            number = cell["cell"] if cell["cell"] is not None else cell["input"]
            line = int(cell["line"]) if cell["line"] else 0
            block.frames.append(Frame(function="<cell>", file=f"<cell In[{number}]>", line=line))
        elif arrow and block.frames and block.frames[-1].line == 0:  # IPython 7: the line
            block.frames[-1] = block.frames[-1].model_copy(update={"line": int(arrow["line"])})
        elif not (arrow or _IPY_CONTEXT.match(stripped)):
            exc = _EXC_LINE.match(stripped)
            if exc:
                block.exception, block.message = exc["type"], (exc["msg"] or "").strip()
            self._close(key)
            return exc is not None
        return True

    def _bare_exception(self, number: int, stripped: str, origin: Origin) -> None:
        """An exception line outside any block: a traceback without its frames."""
        found = _BARE_EXC.match(stripped)
        if found is None or self._repeated((origin.key(), found["type"], found["msg"][:200])):
            return
        block = _Block("tb", number, origin, origin.pid, exception=found["type"])
        block.message = found["msg"].strip()
        self._record(block, [])

    def _pyspy_pid(self, header: str, style: str) -> int | None:
        """The process of a py-spy thread dump: its `Process PID:` header, else the id of its
        main thread, which on Linux py-spy prints as the OS thread id, the process's pid."""
        if style != "pyspy":
            return None
        if self.pyspy_pid is not None:
            return self.pyspy_pid
        thread = _PYSPY_THREAD.match(header)
        if thread and thread["name"] == "MainThread" and thread["tid"].isdigit():
            return int(thread["tid"])
        return None

    def _feed_report(self, number: int, text: str, origin: Origin) -> bool:
        """torchelastic's failure report spreads one failed rank over several lines: join them."""
        stripped = text.strip()
        if stripped in ("Failures:", "Root Cause (first observed failure):"):
            self._close_report()
            self.report_section = stripped
            return True
        if not self.report_section:
            return False
        if _REPORT_ENTRY.match(stripped):
            self._close_report()
            self.report = (number, [], origin)
            return True
        field_line = _REPORT_FIELD.match(text)
        if field_line and self.report is not None:
            self.report[1].append(f"{field_line['key']} : {field_line['value'].strip()}")
            return True
        self._close_report()
        if stripped.startswith(("---", "===")) or stripped == "<NO_OTHER_FAILURES>":
            return True
        self.report_section = ""
        return False

    def _feed_table(self, number: int, text: str, origin: Origin) -> bool:
        """A table that spreads one finding over many rows (torch.cuda.memory_summary()'s
        ~45 rows of one device, results tabulated by GPU count): its rows are joined into
        one line for its signature (`memory.summary`, `generic.metric_table`)."""
        key = origin.key()
        opened = _open_table(text)
        if opened is not None:
            self._close_table(key)
            self.tables[key] = (number, origin, opened)
            return True
        table = self.tables.get(key)
        if table is None:
            return False
        if not table[2].feed(text):
            self._close_table(key)
            return False
        if table[2].done:
            self._close_table(key)
        return True

    def _close_table(self, key: tuple[object, ...]) -> None:
        opened = self.tables.pop(key, None)
        text = opened[2].text() if opened else None
        if opened and text:
            self.joined.append((opened[0], text, opened[1]))

    def _close_report(self) -> None:
        if self.report is None:
            return
        number, fields, origin = self.report
        self.report = None
        if fields:
            first = " first observed failure" if self.report_section.startswith("Root") else ""
            self.joined.append((number, " ".join(fields) + first, origin))

    def _close(self, key: tuple[object, ...]) -> None:
        block = self.open.pop(key, None)
        if block is None or not block.frames:
            return
        same = (block.origin.key(), block.exception, tuple(f.key() for f in block.frames[:8]))
        if self._repeated(same):
            return
        frames = list(reversed(block.frames)) if block.style == "tb" else block.frames
        self._record(block, frames)

    def _repeated(self, same: tuple[object, ...]) -> bool:
        """Seen SAME_BLOCK_KEPT times already: an error logged every step reads as one."""
        self.seen[same] = self.seen.get(same, 0) + 1
        return self.seen[same] > SAME_BLOCK_KEPT

    def _record(self, block: _Block, frames: list[Frame]) -> None:
        user = next((f for f in frames if is_user_code(f.file)), None)
        self.records.append(
            TracebackRecord(
                path=self.path,
                line=block.start,
                rank=block.origin.rank,
                local_rank=block.origin.local_rank,
                host=block.origin.host,
                pid=block.pid,
                exception=block.exception,
                message=block.message[:MAX_LINE],
                frames=frames[:200],
                user_frame=user,
                dump=block.style != "tb" or _interrupted(block.exception),
            )
        )


def placeholder_pid(path: str, line: int) -> int:
    """A stable negative stand-in for the pid of a process dumped at `line` of `path` that
    names neither its pid nor its rank: never a real pid, the same for every thread of one
    dump."""
    return -(1 << 20) - zlib.crc32(f"{path}:{line}".encode()) % (1 << 30)


def _box_inner(stripped: str) -> str:
    """A box line's text between its borders."""
    return stripped.strip("│").strip()


def _rich_frame_line(stripped: str) -> bool:
    """A line of a rich traceback's box that names a frame, or the path of one wrapped onto
    its own line."""
    if not (stripped.startswith("│") and stripped.endswith("│")):
        return False
    inner = _box_inner(stripped)
    frame = _RICH_FRAME.match(inner)
    return bool(frame and frame["file"]) or _RICH_PATH.match(inner) is not None


def _in_fh_dump(text: str) -> bool:
    """A line that may sit inside one faulthandler dump (between its threads included)."""
    stripped = text.strip()
    return (
        not stripped
        or stripped == "<no Python frame>"
        or _FH_START.match(stripped) is not None
        or _FH_FRAME.match(text) is not None
    )


def _interrupted(exception: str | None) -> bool:
    """Ctrl-C or a launcher's SIGTERM stops a waiting rank where it waits: its traceback
    is a stack dump, not the failure."""
    name = (exception or "").rsplit(".", 1)[-1]
    return name in ("KeyboardInterrupt", "SignalException")


@dataclass
class _Block:
    style: str
    start: int
    origin: Origin
    pid: int | None
    frames: list[Frame] = field(default_factory=list)
    exception: str | None = None
    #: Frames pasted without their header: a blank line ends them.
    excerpt: bool = False
    message: str = ""
    #: Inside a rich traceback's box; past its end (the exception line may follow); a
    #: frame's path whose `:line in func` is on the next line.
    boxed: bool = False
    rich_ended: bool = False
    wrapped_path: str = ""
    #: IPython's traceback: numbered source lines and blank lines between its frames.
    ipython: bool = False
