"""Read logs of any size into signals and tracebacks with bounded memory.

One pass per file: a DFA (RE2) looks for the anchors of every signature and block
at disk speed, and only the lines around a hit reach Python (`triage.readers.log_prefilter`).
Hits are bounded per file (the first and the last ones are kept), lines are cut at a
fixed length, and undecodable bytes are replaced, so a 10 GB log, a binary file or a
file cut off mid-line costs bounded memory and never an exception. Torchelastic's error
files (JSON holding a message and a traceback) are read as the text they hold.
"""

from __future__ import annotations

import json
import re
import tempfile
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.observations import Frame, LogSignal, RankState, TracebackRecord
from triage.readers import signatures
from triage.readers.log_prefilter import MAX_LINE, hit_lines, last_line
from triage.readers.signatures.memory import SUMMARY_TITLE, SummaryTable
from triage.readers.stacks import classify, is_user_code

MAX_ERROR_FILE = 16 << 20
PER_KEY_FIRST = 3
PER_KEY_LAST = 12

_RANK_PREFIX = re.compile(r"^\[(?P<role>[A-Za-z_]+?)(?P<n>\d+)\]:\s?")
# `grep -r NCCL logs/` puts the file's name first: `LOG1.0.txt:host:pid:tid [dev] NCCL ...`.
_NCCL_PREFIX = re.compile(
    r"^(?:[^\s:]+\.(?:log|txt|out|err):)?(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
)
_INLINE_RANK = re.compile(r"\[[Rr]ank ?(?P<n>\d+)\]")
_FILE_RANK = re.compile(r"(?i)(?:^|[^a-z])rank[_\-.]?(?P<n>\d+)")
_ELASTIC_DIR = re.compile(
    r"attempt_\d+/(?P<n>\d+)/(?:stdout|stderr)\.log$|/(?P<e>\d+)/error\.json$"
)

_TB_START = "Traceback (most recent call last):"
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_FH_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
_FH_START = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):")
_PYSPY_THREAD = re.compile(
    r'^Thread (?P<tid>\d+|0x[0-9A-Fa-f]+) \((?:idle|active)[^)]*\): "(?P<name>[^"]*)"'
)
_PYSPY_PROCESS = re.compile(r"^Process (?P<pid>\d+): ")
_PYSPY_PYTHON = re.compile(r"^Python v\d+\.\d+")
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>[^\s(][^(]*?) \((?P<file>[^():]+):(?P<line>\d+)\)\s*$")
_FR_START = "Stack trace of the failed collective:"
_FR_FRAME = re.compile(r"^#\d+ (?P<func>\S.*?) from (?P<file>.+):(?P<line>\d+)$")
_REPORT_ENTRY = re.compile(r"^\[\d+\]:\s*$")
_REPORT_FIELD = re.compile(r"^\s+(?P<key>[a-z_]+)\s*:\s?(?P<value>.*)$")
_EXC_LINE = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Warning|Failure))"
    r"(?::\s?(?P<msg>.*))?$"
)

for _anchor, _after in (
    (_TB_START, 400),
    ("(most recent call first):", 200),
    (' (idle): "', 200),
    (' (active): "', 200),
    (' (active+gil): "', 200),
    ("Process ", 1),  # py-spy's `Process PID: cmdline`, confirmed by `Python vX.Y` below it
    ('File "', 1),
    ("Root Cause (first observed failure):", 12),
    (_FR_START, 80),
    ("Failures:", 60),
):
    signatures.block_anchor(_anchor, _after)


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


@dataclass
class ScanResult:
    """Everything one file yielded."""

    path: str
    size: int
    lines: int = 0
    signals: list[LogSignal] = field(default_factory=list)
    tracebacks: list[TracebackRecord] = field(default_factory=list)
    dropped: int = 0
    last_line: str = ""
    #: The rank torchelastic's folder (`attempt_0/3/`) names, once the report ties it.
    folder_rank: int | None = None

    @property
    def rank(self) -> int | None:
        """The rank whose log this is: named by the file or its torchelastic folder, or the
        one rank its lines name."""
        named = file_origin(self.path).rank
        if named is not None or self.folder_rank is not None:
            return named if named is not None else self.folder_rank
        ranks = {s.rank for s in self.signals} | {t.rank for t in self.tracebacks}
        ranks.discard(None)
        return ranks.pop() if len(ranks) == 1 else None


def file_origin(path: str) -> Origin:
    """The rank a file's name or folder names: `rank3.log`, torchelastic's `attempt_0/3/`."""
    name = Path(path).name
    origin = Origin()
    found = _FILE_RANK.search(name)
    if found:
        origin.rank = int(found.group("n"))
    elastic = _ELASTIC_DIR.search(path.replace("\\", "/"))
    if elastic:
        origin.local_rank = int(elastic.group("n") or elastic.group("e"))
    return origin


def split_prefix(line: str, base: Origin) -> tuple[str, Origin]:
    """Strip `[rank3]:`, `[default3]:` and NCCL's `host:pid:tid [dev]` prefixes into an Origin."""
    origin = Origin(base.rank, base.local_rank, base.host, base.pid, base.device)
    while found := _RANK_PREFIX.match(line):  # torchrun may stack `[default2]:[rank2]:`
        number = int(found.group("n"))
        if found.group("role").lower() == "rank":
            origin.rank = number
        else:
            origin.local_rank = number
        line = line[found.end() :]
    nccl = _NCCL_PREFIX.match(line)
    if nccl:
        origin.host, origin.pid = nccl.group("host"), int(nccl.group("pid"))
        origin.device = int(nccl.group("dev"))
        line = line[nccl.end() :]
    if origin.rank is None:
        inline = _INLINE_RANK.search(line)
        if inline:
            origin.rank = int(inline.group("n"))
    return line, origin


def scan_file(path: Path, source: Path | None = None) -> ScanResult:
    """Signals and tracebacks of one file; `source` names the file it was extracted from
    (its name and folder still tell the rank)."""
    lines, total, dropped = hit_lines(path)
    named = source or path
    result = ScanResult(
        path=str(named),
        size=named.stat().st_size,
        lines=total,
        dropped=dropped,
        last_line=last_line(path),
    )
    base = file_origin(str(named))
    parser = _BlockParser(str(named))
    bounded = _Bounded()
    previous = 0
    for number, raw in lines:
        if number != previous + 1:
            parser.reset()
        previous = number
        text, origin = split_prefix(raw, base)
        for sig, fields in signatures.matches(text):
            bounded.add(_signal(sig, fields, text, str(named), number, origin))
        parser.feed(number, text, origin)
    parser.reset()
    for number, text, origin in parser.joined:
        for sig, fields in signatures.matches(text):
            bounded.add(_signal(sig, fields, text, str(named), number, origin))
    result.signals = bounded.items()
    result.tracebacks = parser.records
    learn_ranks([result])
    return result


def scan_log(path: Path) -> ScanResult:
    """Signals and tracebacks of one log; torchelastic error files are JSON holding a
    message and a traceback: those are read as text."""
    if path.stat().st_size <= MAX_ERROR_FILE and path.suffix == ".json":
        try:
            payload = json.loads(path.read_text(errors="replace"))
        except (ValueError, UnicodeDecodeError):
            payload = None
        if isinstance(payload, dict) and isinstance(payload.get("message"), (dict, str)):
            return _scan_elastic_error(path, payload)
    return scan_file(path)


def _scan_elastic_error(path: Path, payload: dict[str, Any]) -> ScanResult:
    message = payload["message"]
    parts = (
        [message]
        if isinstance(message, str)
        else [
            str(message.get("message", "")),
            str(message.get("extraInfo", {}).get("py_callstack", "")),
        ]
    )
    with tempfile.TemporaryDirectory(prefix="triage-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text("\n".join(parts))
        return scan_file(copy, source=path)


def dump_state(record: TracebackRecord) -> RankState | None:
    """A dump of a main thread as a RankState; None for tracebacks and threading's threads.

    The dump's pid when it names one (py-spy's `Process N:`, NCCL prefixes), else a stable
    negative placeholder: -1 - rank, or derived from where the dump sits in its file.
    """
    if not record.dump or not record.frames:
        return None
    outermost = record.frames[-1]
    function = outermost.function.rsplit(".", 1)[-1]  # py-spy says `Thread._bootstrap`
    if outermost.file.endswith("threading.py") and function.startswith("_bootstrap"):
        return None
    if record.pid is not None:
        pid = record.pid
    elif record.rank is not None:
        pid = -1 - record.rank
    else:
        pid = -(1 << 20) - zlib.crc32(f"{record.path}:{record.line}".encode()) % (1 << 30)
    return classify(record.frames, pid=pid, rank=record.rank, host=record.host or "")


def _signal(
    sig: signatures.Signature,
    fields: dict[str, Any],
    text: str,
    path: str,
    number: int,
    origin: Origin,
) -> LogSignal:
    rank = origin.rank
    if (
        rank is None
        and isinstance(fields.get("rank"), (int, str))
        and str(fields["rank"]).isdigit()
    ):
        rank = int(fields["rank"])
    return LogSignal(
        signature=sig.name,
        text=text[:MAX_LINE].strip(),
        path=path,
        line=number,
        rank=rank,
        local_rank=origin.local_rank,
        host=origin.host,
        pid=origin.pid,
        device=origin.device,
        peer_symptom=sig.peer_symptom,
        fields=fields,
    )


class _Bounded:
    """The first and the last few signals per (signature, rank): 1M identical lines read as 15."""

    def __init__(self) -> None:
        self.first: dict[tuple[object, ...], list[LogSignal]] = {}
        self.last: dict[tuple[object, ...], deque[LogSignal]] = {}

    def add(self, item: LogSignal) -> None:
        key = (item.signature, item.rank, item.local_rank, item.pid)
        first = self.first.setdefault(key, [])
        if len(first) < PER_KEY_FIRST:
            first.append(item)
        else:
            self.last.setdefault(key, deque(maxlen=PER_KEY_LAST)).append(item)

    def items(self) -> list[LogSignal]:
        out = [s for key in self.first for s in self.first[key] + list(self.last.get(key, ()))]
        return sorted(out, key=lambda s: s.line)


def learn_ranks(results: list[ScanResult]) -> None:
    """Give every line its global rank when some line ties its writer to one.

    NCCL lines carry a pid and NCCL's init lines tie the pid to a rank; torchrun's
    `[default1]:` prefix is a local rank and its failure report ties local ranks to ranks.
    The ties may sit in other files (per-pid NCCL files beside per-rank logs).
    """
    by_pid: dict[object, int] = {}
    by_local: dict[object, set[int]] = {}
    hosts: set[str | None] = set()
    for result in results:
        for s in result.signals:
            rank = str(s.fields.get("rank", s.rank))
            if not rank.isdigit():
                continue
            pid = s.pid if s.pid is not None else s.fields.get("pid")
            if pid is not None and str(pid).isdigit():
                by_pid[(s.host, int(pid))] = by_pid[int(pid)] = int(rank)
            local = s.fields.get("local_rank")
            if local is not None and str(local).isdigit():
                host = s.fields.get("host", s.host)
                if host is not None:
                    hosts.add(host)
                by_local.setdefault(int(local), set()).add(int(rank))
    one_node = len(hosts) <= 1
    for result in results:
        local = file_origin(result.path).local_rank
        if local is not None and one_node and len(by_local.get(local, ())) == 1:
            result.folder_rank = next(iter(by_local[local]))
        items: list[LogSignal | TracebackRecord] = [*result.signals, *result.tracebacks]
        for item in items:
            if item.rank is not None:
                continue
            pid = item.pid if item.pid is not None else getattr(item, "fields", {}).get("pid")
            if pid is not None and str(pid).isdigit():
                item.rank = by_pid.get((item.host, int(pid)), by_pid.get(int(pid)))
            if item.rank is None and item.local_rank is not None and one_node:
                candidates = by_local.get(item.local_rank, set())
                item.rank = next(iter(candidates)) if len(candidates) == 1 else None


class _BlockParser:
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
        self.summaries: dict[tuple[object, ...], tuple[int, Origin, SummaryTable]] = {}

    def reset(self) -> None:
        for key in list(self.summaries):
            self._close_summary(key)
        self.pyspy_header = None
        for key in list(self.open):
            self._close(key)
        self._close_report()
        self.report_section = ""

    def feed(self, number: int, text: str, origin: Origin) -> None:
        if self._feed_summary(number, text, origin):
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
            self.open[key] = _Block(style, number, origin, pid)
            return
        frame = _TB_FRAME.match(text) or _FH_FRAME.match(text)
        if block is None:
            if frame:  # frames without a header: a pasted excerpt of a traceback or dump
                style = "tb" if _TB_FRAME.match(text) else "fh"
                block = self.open[key] = _Block(style, number, origin, origin.pid)
            else:
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
            elif stripped and not text[:1].isspace() and block.frames:
                self._close(key)
            return
        if stripped and not text[:1].isspace():
            self._close(key)

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

    def _feed_summary(self, number: int, text: str, origin: Origin) -> bool:
        """A torch.cuda.memory_summary() table spreads one device's counters over ~45 rows:
        join them into one line for `memory.summary`."""
        key = origin.key()
        if SUMMARY_TITLE in text:
            self._close_summary(key)
            self.summaries[key] = (number, origin, SummaryTable(text))
            return True
        table = self.summaries.get(key)
        if table is None:
            return False
        if not table[2].feed(text):
            self._close_summary(key)
            return False
        if table[2].done:
            self._close_summary(key)
        return True

    def _close_summary(self, key: tuple[object, ...]) -> None:
        opened = self.summaries.pop(key, None)
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
        self.seen[same] = self.seen.get(same, 0) + 1
        if self.seen[same] > PER_KEY_FIRST:  # a traceback repeated every step reads as one
            return
        frames = list(reversed(block.frames)) if block.style == "tb" else block.frames
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
    message: str = ""
