"""The first pass over a log: the numbered lines that hold an anchor, with their context.

A DFA (RE2) over the anchors of every signature and block (`triage.readers.signatures`)
looks for hits at disk speed, reading the file in 16 MB chunks of whole lines; only the
lines around a hit reach Python. Hits are bounded per file (the first HEAD_LINES and the
last TAIL_LINES are kept), lines are cut at MAX_LINE keeping what matters, ANSI colours
are dropped and undecodable bytes replaced, so a 10 GB log, a binary file or a file cut
off mid-line costs bounded memory and never an exception. `triage.readers.logscan` reads
the lines this gives into signals and tracebacks.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path
from typing import Any

import re2  # type: ignore[import-untyped]

from triage.readers import signatures

CHUNK = 16 << 20
MAX_LINE = 4096
HEAD_LINES = 4000
TAIL_LINES = 16000


_compiled: tuple[int, Any, dict[bytes, int]] | None = None


def _prefilter() -> tuple[Any, dict[bytes, int]]:
    """One RE2 DFA over every anchor, compiled once per anchor table (plugins may add some)."""
    global _compiled
    version = len(signatures.load()) + len(signatures.BLOCK_ANCHORS)
    if _compiled is None or _compiled[0] != version:
        table = signatures.anchors()
        ordered = sorted(table, key=len, reverse=True)
        pattern = re2.compile(b"|".join(re.escape(a).encode() for a in ordered))
        _compiled = (version, pattern, {a.encode(): after for a, after in table.items()})
    return _compiled[1], _compiled[2]


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


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


class _Window:
    """Hit lines plus their context, bounded: the first HEAD_LINES and the last TAIL_LINES."""

    def __init__(self, pattern: Any) -> None:
        self.pattern = pattern
        self.head: list[tuple[int, str]] = []
        self.tail: deque[tuple[int, str]] = deque(maxlen=TAIL_LINES)
        self.dropped = 0
        self.last = 0

    def add(self, number: int, raw: bytes) -> None:
        if number <= self.last:
            return
        self.last = number
        raw = _clip(raw, self.pattern)
        text = raw.decode("utf-8", "replace").rstrip("\r").replace("\x00", "")
        if "\x1b" in text:  # coloured loggers (torchtitan, rich): the text, not the escapes
            text = _ANSI.sub("", text)
        if len(self.head) < HEAD_LINES:
            self.head.append((number, text))
        else:
            if len(self.tail) == TAIL_LINES:
                self.dropped += 1
            self.tail.append((number, text))

    def lines(self) -> list[tuple[int, str]]:
        return self.head + list(self.tail)


def hit_lines(path: Path) -> tuple[list[tuple[int, str]], int, int]:
    """Numbered lines holding an anchor, with the context their anchor asks for.

    Returns the lines, the file's line count and how many hit lines were dropped.
    """
    pattern, after_of = _prefilter()
    window = _Window(pattern)
    base_line = 1
    carry = b""
    pending = 0
    with path.open("rb") as handle:
        while True:
            block = handle.read(CHUNK)
            data = carry + block
            if not data:
                break
            if block:
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # no newline in 16 MB: binary or one giant line
                    hit = pattern.search(data)
                    if hit:
                        start = max(0, hit.start() - MAX_LINE // 4)
                        window.add(base_line, data[start : start + MAX_LINE])
                    carry = data[-MAX_LINE:]
                    continue
                data, carry = data[:cut], data[cut:][-(CHUNK):]
            else:
                carry = b""
            pending = _scan_chunk(data, base_line, pattern, after_of, window, pending)
            base_line += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            if not block:
                break
    return window.lines(), base_line - 1, window.dropped


def _scan_chunk(
    data: bytes,
    base_line: int,
    pattern: Any,
    after_of: dict[bytes, int],
    window: _Window,
    pending: int,
) -> int:
    """Add the hit lines of one chunk of whole lines; returns context still owed to the next."""
    line_no, counted_to = base_line, 0
    position = 0
    if pending:
        position = _take_lines(data, 0, pending, base_line, window)
        pending = max(0, pending - data.count(b"\n", 0, position))
    for hit in pattern.finditer(data):
        start = data.rfind(b"\n", 0, hit.start()) + 1
        if start < position:
            continue
        line_no += data.count(b"\n", counted_to, start)
        counted_to = start
        after = after_of.get(hit.group(0), 0)
        end = _take_lines(data, start, after + 1, line_no, window)
        position = end
        taken = data.count(b"\n", start, end)
        pending = max(0, after + 1 - taken) if end >= len(data) else 0
    return pending


def _take_lines(data: bytes, start: int, count: int, first_no: int, window: _Window) -> int:
    """Add up to `count` lines from `start`; returns the offset after the last one."""
    position = start
    for index in range(count):
        if position >= len(data):
            break
        end = data.find(b"\n", position)
        end = len(data) if end == -1 else end
        window.add(first_no + index, data[position:end])
        position = end + 1
    return min(position, len(data))


def last_line(path: Path, limit: int = 200) -> str:
    """The file's last non-empty line (cut to `limit`): where a rank's log stops says where
    the rank was when it stopped writing, even when no signature matched there."""
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - MAX_LINE))
        tail = handle.read()
    for raw in reversed(tail.splitlines()):
        text = _ANSI.sub("", raw.decode("utf-8", "replace").rsplit("\r", 1)[-1]).strip()
        if text:
            return text.replace("\x00", "")[:limit]
    return ""
