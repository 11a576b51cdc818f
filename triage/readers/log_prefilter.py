"""The first pass over a log: lines that hold an anchor, and runs of frequent lines as counts.

One RE2 DFA over the anchors of every signature and block (`triage.readers.signatures`)
reads a stretch of a file (`scan_range`) at disk speed and finds two kinds of hit:

- a line holding an anchor: it and the context its anchor asks for reach Python;
- the start of a run of lines of a frequent signature (NCCL's per-op COLL lines): the
  run is taken whole, by counting where it is long (a window whose newlines and anchors
  count the same holds nothing else, `_Window`) and by an anchored DFA match where it is
  short, then counted per series by `triage.readers.log_runs` with byte counts; only the
  first and last lines of each series are decoded.

So a log costs about one pass of byte counts over its frequent lines plus the DFA's pass
over the rest and Python's work on its rare lines, however many frequent lines it holds.
Line numbers come from newline counts of the bytes between runs and the runs' own counts. Lines are cut at MAX_LINE keeping what matters, ANSI colours are dropped and
undecodable bytes replaced: a binary file or one cut off mid-line costs bounded memory and
never an exception. `triage.readers.logscan` reads what this gives into signals.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2  # type: ignore[import-untyped]

from triage.readers import byte_counts, signatures
from triage.readers.log_runs import Frequent, Key, Runs

MAX_LINE = 4096
#: How far past the end of its stretch a scan reads for the context of a late anchor.
MAX_OVERFLOW = 2 << 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class SeriesPart:
    """One series' lines in one stretch: how many, and the first and last few."""

    count: int = 0
    first: list[tuple[int, str]] = field(default_factory=list)
    last: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class RangeScan:
    """What the first pass found in one stretch of a file; line numbers count from 1 at the
    stretch's first line."""

    newlines: int = 0
    #: Its last line has no newline: at the end of a file, one more line.
    unterminated: bool = False
    #: Why the stretch could not be read (the file went away), else "".
    error: str = ""
    #: (line, text, anchored): anchored lines hold a signature's anchor, the others are context.
    hits: list[tuple[int, str, bool]] = field(default_factory=list)
    #: Context lines past the stretch's end, for the block parsers only.
    overflow: list[tuple[int, str]] = field(default_factory=list)
    #: (signature, writer, key value) -> its lines here.
    series: dict[Key, SeriesPart] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    """The first pass's DFA and what it needs to read a hit."""

    pattern: Any
    after_of: dict[bytes, int]
    signature_anchors: frozenset[bytes]
    frequent: tuple[Frequent, ...]
    #: The anchors that ask for context lines: one inside a context line asks for more.
    context_anchors: Any


_compiled: tuple[int, Table] | None = None


def _options() -> Any:
    """Bytes matched as bytes (Latin-1): `[^\\n]` is one byte, and the DFA twice as fast as
    over UTF-8; anchors are matched by their UTF-8 bytes all the same."""
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.max_mem = 64 << 20
    return options


def _latin(pattern: str) -> bytes:
    return pattern.encode("utf-8")


def compile_table() -> Table:
    """One RE2 DFA over every anchor and the start of every frequent line, compiled once per
    table (plugins may add signatures). Frequent lines come first: at a line's start the run
    wins over an anchor later in the same line (`Reduce` in `AllReduce: opCount`)."""
    global _compiled
    version = len(signatures.load()) + len(signatures.BLOCK_ANCHORS)
    if _compiled is None or _compiled[0] != version:
        table = {
            worn: after
            for anchor, after in signatures.anchors().items()
            for worn in _worn([anchor])
        }
        frequent = tuple(
            Frequent(
                sig,
                re2.compile(_latin(f"(?:[^\\n]*{sig.series.line}[^\\n]*\\n)+"), _options()),
                sig.anchors[0].encode(),
            )
            for sig in signatures.frequent()
            if sig.series is not None
        )
        starts = [f"[^\\n]*{f.signature.series.line}" for f in frequent if f.signature.series]
        literals = [re.escape(a) for a in sorted(table, key=len, reverse=True)]
        pattern = re2.compile(_latin("|".join(starts + literals)), _options())
        owned = frozenset(a.encode() for s in signatures.load().values() for a in _worn(s.anchors))
        anchors = owned - {a.encode() for a in _worn(signatures.BLOCK_ANCHORS)}
        after_of = {a.encode(): after for a, after in table.items()}
        asking = sorted((a for a, after in table.items() if after), key=len, reverse=True)
        context = re2.compile(_latin("|".join(re.escape(a) for a in asking)), _options())
        _compiled = (version, Table(pattern, after_of, anchors, frequent, context))
    return _compiled[1]


def _worn(anchors: Iterable[str]) -> list[str]:
    """Each anchor as written, HTML-escaped (`File &quot;`) and JSON-escaped (`File \\"`): a
    log copied out of a web page keeps its escapes, a JSON log record escapes its line's
    quotes and backslashes, and `log_dress` takes them off once the line is found."""
    return list(
        dict.fromkeys(
            worn
            for a in anchors
            for worn in (a, html.escape(a), json.dumps(a, ensure_ascii=False)[1:-1])
        )
    )


def decode(raw: bytes, pattern: Any) -> str:
    """A line's text: cut to MAX_LINE (`_clip`), colours dropped, bad bytes replaced."""
    text = _clip(raw, pattern).decode("utf-8", "replace").rstrip("\r").replace("\x00", "")
    if "\x1b" in text:  # coloured loggers (torchtitan, rich): the text, not the escapes
        text = _ANSI.sub("", text)
    return text


def _clip(raw: bytes, pattern: Any) -> bytes:
    """A line longer than MAX_LINE keeps what matters: the text after the last carriage
    return (a progress bar's final state), else the stretch around the first anchor."""
    if len(raw) <= MAX_LINE:
        return raw
    redrawn = raw[raw.rfind(b"\r") + 1 :]
    if len(redrawn) <= MAX_LINE:
        return redrawn
    hit = pattern.search(redrawn)
    start = max(0, hit.start() - MAX_LINE // 4) if hit else 0
    return redrawn[start : start + MAX_LINE]


def scan_range(path: str, start: int, end: int) -> RangeScan:
    """The hits of bytes [start, end) of a file; `start` is a line's start, or a point
    inside a line longer than the alignment window (`triage.readers.log_chunks`)."""
    table = compile_table()
    out = RangeScan()
    try:
        with Path(path).open("rb") as handle:
            handle.seek(start)
            data = handle.read(end - start)
            owed = _scan(data, table, out)
            if owed and len(data) == end - start:
                out.overflow = _overflow(handle, owed, out.newlines + 1, table.pattern)
    except OSError as exc:
        return RangeScan(error=exc.strerror or str(exc))
    out.unterminated = bool(data) and not data.endswith(b"\n")
    return out


def _scan(data: bytes, table: Table, out: RangeScan) -> int:
    """Collect the stretch's anchored lines (with their context) and its runs; returns the
    context lines still owed past its end."""
    pattern = table.pattern
    lines = _Lines(data, pattern)
    runs = Runs(data)
    window = _Window()
    position = owed = 0
    while position < len(data):
        hit = pattern.search(data, position)
        if hit is None:
            break
        begin = hit.start()
        line_start = data.rfind(b"\n", 0, begin) + 1
        anchor = hit.group(0)
        if anchor not in table.after_of:  # the start of a frequent line
            run = window.take(data, line_start, table.frequent) or _run(
                data, line_start, table.frequent
            )
            if run is not None:
                item, finish, counted = run
                lines.run(line_start, finish, runs.add(item, line_start, finish, counted))
                position = finish
                continue
        anchored = anchor in table.signature_anchors or _anchored_later(data, hit.end(), table)
        lines.want(line_start, anchored=anchored)
        position = lines.end_of(line_start)
        # the line's first anchor may ask for no context while a later one opens a block
        # (`ERROR ... Stack trace of the failed collective:`)
        later = table.context_anchors.search(data, hit.end(), position)
        remaining = max(
            table.after_of.get(anchor, 0), table.after_of[later.group(0)] if later else 0
        )
        while remaining:
            if position >= len(data):
                owed = remaining
                break
            lines.want(position)
            end = lines.end_of(position)
            inner = table.context_anchors.search(data, position, end)
            # a frame line inside a frame's context (`File "` twice) asks for its own line
            remaining = max(remaining - 1, table.after_of[inner.group(0)] if inner else 0)
            position = end
    for key, sampled in runs.series().items():
        part = out.series[key] = SeriesPart(sampled.count)
        for offset in sampled.first:
            lines.want(offset, into=part.first)
        for offset in sampled.last:
            lines.want(offset, into=part.last)
    for offset in runs.strays:
        lines.want(offset, anchored=True)
    lines.sweep(out)
    return owed


def _anchored_later(data: bytes, start: int, table: Table) -> bool:
    """Whether the rest of a line whose first anchor opens a block (`RuntimeError:` before
    `out of memory`) holds a signature's anchor."""
    end = data.find(b"\n", start)
    end = len(data) if end == -1 else end
    while (hit := table.pattern.search(data, start, end)) is not None and hit.end() > start:
        if hit.group(0) in table.signature_anchors:
            return True
        start = hit.end()
    return False


def _run(
    data: bytes, start: int, frequent: tuple[Frequent, ...]
) -> tuple[Frequent, int, int | None] | None:
    """The run of frequent lines starting at `start`, read by the DFA to where it ends; None
    when there is none (a frequent line without its newline, at the end of a file)."""
    for item in frequent:
        found = item.run.match(data, start)
        if found is not None:
            return item, int(found.end()), None
    return None


class _Window:
    """Long runs taken without the DFA: when every line of the next window of bytes holds
    a frequent line's anchor (its newlines and its anchors count the same), and, for a
    series whose anchor other lines hold too (`can't allocate memory: you tried` among
    `step: 10 ... memory: 61.2GiB` lines), the run's pattern takes it whole, the window is
    one run, and the next window is twice as large. A window that holds other lines is left to the
    DFA, and the next try waits twice as long as the last, so that short runs between other
    lines (a COLL line or two per training step) cost next to nothing in tries."""

    SMALLEST = 64 << 10
    LARGEST = 8 << 20

    def __init__(self) -> None:
        self.size = self.SMALLEST
        self.wait = self.SMALLEST
        self.after = 0

    def take(
        self, data: bytes, start: int, frequent: tuple[Frequent, ...]
    ) -> tuple[Frequent, int, int] | None:
        if start < self.after:
            return None
        cut = data.rfind(b"\n", start, start + self.size) + 1
        lines = byte_counts.count(data, b"\n", start, cut) if cut else 0
        for item in frequent if lines > 1 else ():
            if byte_counts.count(data, item.anchor, start, cut) == lines and (
                _anchor_is_line(item) or _whole(item, data, start, cut)
            ):
                self.size = min(self.size * 2, self.LARGEST)
                self.wait = self.SMALLEST
                return item, cut, lines
        self.after = start + self.wait
        self.size, self.wait = self.SMALLEST, min(self.wait * 2, self.LARGEST)
        return None


def _anchor_is_line(item: Frequent) -> bool:
    series = item.signature.series
    return series is None or series.anchor_is_line


def _whole(item: Frequent, data: bytes, start: int, cut: int) -> bool:
    """Whether the run's pattern takes every line of [start, cut)."""
    found = item.run.match(data, start, cut)
    return found is not None and int(found.end()) == cut


def _overflow(handle: Any, owed: int, first: int, pattern: Any) -> list[tuple[int, str]]:
    """Up to `owed` whole lines after the stretch, read from where the handle stands."""
    tail = handle.read(MAX_OVERFLOW)
    pieces = tail.split(b"\n", owed)
    if len(pieces) > owed:
        lines = pieces[:owed]
    else:  # the rest of what was read: its last piece is a line only at the file's end
        ended = len(tail) < MAX_OVERFLOW and pieces[-1]
        lines = pieces if ended else pieces[:-1]
    return [(first + index, decode(raw, pattern)) for index, raw in enumerate(lines)]


class _Lines:
    """Lines to decode by the offset of their start, numbered in one sweep at the end.

    Newlines are counted byte by byte only between runs; a run's lines are already counted
    (`Runs.add`), and a line inside a run is numbered from the nearer end of its run, so a
    log of frequent lines is never counted line by line.
    """

    def __init__(self, data: bytes, pattern: Any) -> None:
        self.data = data
        self.pattern = pattern
        self.wanted: list[tuple[int, list[tuple[int, str]] | None, bool]] = []
        self.runs: list[tuple[int, int, int]] = []

    def end_of(self, start: int) -> int:
        """The offset after the line starting at `start`."""
        end = self.data.find(b"\n", start)
        return len(self.data) + 1 if end == -1 else end + 1

    def want(
        self, start: int, *, into: list[tuple[int, str]] | None = None, anchored: bool = False
    ) -> None:
        """Keep the line starting at `start`: into a series' list, else among the hits."""
        self.wanted.append((start, into, anchored))

    def run(self, begin: int, finish: int, lines: int) -> None:
        self.runs.append((begin, finish, lines))

    def sweep(self, out: RangeScan) -> None:
        counter = _Counter(self.data, self.runs)
        for start, into, anchored in sorted(self.wanted, key=lambda wanted: wanted[0]):
            line = counter.line_at(start)
            text = decode(self.data[start : self.end_of(start) - 1], self.pattern)
            if into is None:
                out.hits.append((line, text, anchored))
            else:
                into.append((line, text))
        out.newlines = counter.line_at(len(self.data)) - 1


class _Counter:
    """Line numbers at increasing offsets of a stretch whose runs' line counts are known."""

    def __init__(self, data: bytes, runs: list[tuple[int, int, int]]) -> None:
        self.data = data
        self.runs = runs
        self.next = 0  # the first run not yet passed
        self.position = 0
        self.line = 1
        self.run_line = 1  # the line number where runs[next] starts, once reached

    def line_at(self, offset: int) -> int:
        data = self.data
        while self.next < len(self.runs) and self.runs[self.next][1] <= offset:
            begin, finish, lines = self.runs[self.next]
            if self.position <= begin:
                self.run_line = self.line + byte_counts.count(data, b"\n", self.position, begin)
            self.line, self.position = self.run_line + lines, finish
            self.next += 1
        if self.next < len(self.runs) and self.runs[self.next][0] < offset:
            begin, finish, lines = self.runs[self.next]
            if self.position <= begin:
                self.run_line = self.line + byte_counts.count(data, b"\n", self.position, begin)
                self.line, self.position = self.run_line, begin
            if offset - self.position <= finish - offset:
                self.line += byte_counts.count(data, b"\n", self.position, offset)
            else:
                self.line = self.run_line + lines - byte_counts.count(data, b"\n", offset, finish)
        else:
            self.line += byte_counts.count(data, b"\n", self.position, offset)
        self.position = offset
        return self.line


def last_lines(path: Path, count: int, limit: int = 200) -> list[str]:
    """The file's last `count` non-empty lines in order (each cut to `limit`), from its last
    MAX_LINE bytes: where a rank's log stops says where the rank was when it stopped writing,
    even when no signature matched there, and what a paste ends on (numbers, a progress line)."""
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - MAX_LINE))
        tail = handle.read()
    found: list[str] = []
    for raw in reversed(tail.splitlines()):
        text = _ANSI.sub("", raw.decode("utf-8", "replace").rsplit("\r", 1)[-1]).strip()
        if text:
            found.append(text.replace("\x00", "")[:limit])
            if len(found) == count:
                break
    return found[::-1]
