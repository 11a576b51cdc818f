"""Runs of frequent lines, counted per series with byte counts instead of line by line.

The first pass hands over each run of consecutive lines of a frequent signature (NCCL's
per-op COLL lines) as one span. A series is one writer's lines of one key: a rank's lines
on one communicator. The writer is the line's prefix (`writer_of`: `[rank3]:host:pid:`)
and the key sits in the signature's token (`comm 0x... `); both are literals, so counting
them in the span counts each series' lines in C. Python reads a line only to meet a
writer or key for the first time. When the counts do not add up (two writers printing one
communicator address, a line that does not parse), that run is read line by line.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from triage.readers import byte_counts
from triage.readers.signatures import Series, Signature

#: Lines kept from the start and from the end of each series.
SERIES_FIRST = 3
SERIES_LAST = 12

#: torchrun's `[rank3]:`/`[default3]:` prefixes, grep's `file.log:` and NCCL's `host:pid:`
#: (its thread id, which varies from line to line, left out).
_WRITER = (
    r"(?:\[[A-Za-z_]+\d+\]:\s?)*(?:[^\s:]+\.(?:log|txt|out|err):)?"
    r"(?:[\w.\-]+:\d+:(?=\d+ \[\d+\] ))?"
)
_WRITER_TEXT = re.compile(_WRITER)
_WRITER_BYTES = re.compile(_WRITER.encode())

#: (signature, writer, key value): one series.
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Frequent:
    """A frequent signature as the first pass finds it: the RE2 pattern that takes a whole
    run of its lines, and its anchor, which each line holds once (counting it counts lines)."""

    signature: Signature
    run: Any
    anchor: bytes


def writer_of(line: str) -> str:
    """The prefix that names who wrote a line, "" when it has none."""
    found = _WRITER_TEXT.match(line)
    return found.group(0) if found else ""


@dataclass
class Sampled:
    """One series in one stretch: its count and where its first and last lines start."""

    count: int = 0
    first: list[int] = field(default_factory=list)
    last: deque[int] = field(default_factory=lambda: deque(maxlen=SERIES_LAST))

    def see(self, offset: int) -> None:
        self.count += 1
        if len(self.first) < SERIES_FIRST:
            self.first.append(offset)
        else:
            self.last.append(offset)


class Runs:
    """The runs of one stretch of bytes, counted per series."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.writers: set[bytes] = set()
        #: (signature, key value) -> its token, and the writer that owns it in counted runs.
        self.tokens: dict[tuple[str, str], bytes] = {}
        self.owner: dict[tuple[str, str], bytes] = {}
        self.counted: dict[Key, int] = {}
        self.spans: dict[str, list[tuple[int, int]]] = {}
        self.walked: dict[Key, Sampled] = {}
        #: Offsets of lines that hold a frequent line's text but do not parse as one.
        self.strays: list[int] = []
        #: Whether runs may be counted by their progress field (until it once fails to).
        self.stepping = True

    def add(self, frequent: Frequent, begin: int, finish: int, lines: int | None = None) -> int:
        """A run [begin, finish) of whole lines, each holding the frequent line's text;
        returns how many lines it holds (`lines`, when the caller counted them)."""
        sig, series = frequent.signature, frequent.signature.series
        lines = (
            byte_counts.count(self.data, frequent.anchor, begin, finish) if lines is None else lines
        )
        if series is not None and (
            self._step(sig, series, begin, finish, lines)
            or self._count(sig, series, begin, finish, lines)
        ):
            return lines
        self.stepping = False
        return self._walk(sig, begin, finish)

    def series(self) -> dict[Key, Sampled]:
        """Every series met: its count and the offsets of its first and last lines."""
        out: dict[Key, Sampled] = {}
        for (name, value), token in self.tokens.items():
            key = (name, self.owner[(name, value)].decode("utf-8", "replace"), value)
            count = self.counted.get(key, 0)
            if not count:
                continue
            spans = self.spans[name]
            out[key] = Sampled(
                count,
                _occurrences(self.data, token, spans, SERIES_FIRST, forward=True),
                deque(
                    reversed(_occurrences(self.data, token, spans, SERIES_LAST, forward=False)),
                    maxlen=SERIES_LAST,
                ),
            )
        for key, walked in self.walked.items():
            counted = out.setdefault(key, Sampled())
            counted.count += walked.count
            offsets = sorted({*counted.first, *counted.last, *walked.first, *walked.last})
            counted.first = offsets[:SERIES_FIRST]
            counted.last = deque(offsets[SERIES_FIRST:][-SERIES_LAST:], maxlen=SERIES_LAST)
        return out

    def _step(self, sig: Signature, series: Series, begin: int, finish: int, lines: int) -> bool:
        """Count the run's lines per series from how far each got: a series whose progress
        (NCCL's opCount) grows by one a line holds its last value less its first, plus one.
        Only the first and last line of each known series are read. False, and from then on
        the tokens are counted, when the sums do not account for every line: a series not
        met before, ops grouped under one opCount or skipping some, two writers on one key.
        """
        if not self.stepping or series.progress is None or not self.tokens:
            return False
        data, steps = self.data, {}
        for (name, value), token in self.tokens.items():
            first = data.find(token, begin, finish) if name == sig.name else -1
            if first == -1:
                continue
            owner = self.owner[(name, value)]
            grown = self._progress(sig, series.progress, owner, first)
            last = self._progress(sig, series.progress, owner, data.rfind(token, begin, finish))
            if grown is None or last is None or last < grown:
                self.stepping = False
                return False
            steps[(name, owner.decode("utf-8", "replace"), value)] = last - grown + 1
        if sum(steps.values()) != lines:
            self.stepping = False
            return False
        for key, count in steps.items():
            self.counted[key] = self.counted.get(key, 0) + count
        self.spans.setdefault(sig.name, []).append((begin, finish))
        return True

    def _progress(self, sig: Signature, field: str, writer: bytes, offset: int) -> int | None:
        """The progress field of the line holding `offset`; None when the line does not
        parse or another writer wrote it."""
        start = self.data.rfind(b"\n", 0, offset) + 1
        end = self.data.find(b"\n", offset)
        raw = self.data[start : len(self.data) if end == -1 else end]
        fields = sig.match(raw.decode("utf-8", "replace")) if _writer(raw) == writer else None
        value = None if fields is None else fields.get(field)
        return value if isinstance(value, int) else None

    def _count(self, sig: Signature, series: Series, begin: int, finish: int, lines: int) -> bool:
        """Count the run's `lines` per series by their tokens; False when the counts do not
        account for every line with one writer per key."""
        data = self.data
        by_writer = {w: self._starting(w, begin, finish) for w in self.writers}
        by_value = {
            value: byte_counts.count(data, token, begin, finish)
            for (name, value), token in self.tokens.items()
            if name == sig.name
        }
        position = begin
        while position < finish and (
            sum(by_writer.values()) < lines or sum(by_value.values()) < lines
        ):
            end = data.find(b"\n", position, finish) + 1
            raw = data[position : end - 1]
            writer = _writer(raw)
            if writer not in by_writer:
                self.writers.add(writer)
                by_writer[writer] = self._starting(writer, begin, finish)
            fields = sig.match(raw.decode("utf-8", "replace"))
            value = None if fields is None else series.value_of(fields)
            if value is None:
                return False
            if (sig.name, value) not in self.tokens:
                self.tokens[(sig.name, value)] = token = series.token_of(value)
                self.owner[(sig.name, value)] = writer
                by_value[value] = byte_counts.count(data, token, begin, finish)
            position = end
        owned = dict.fromkeys(by_writer, 0)
        for value, count in by_value.items():
            owned[self.owner[(sig.name, value)]] += count
        if sum(by_value.values()) != lines or owned != by_writer:
            return False
        for value, count in by_value.items():
            if count:
                key = (sig.name, self.owner[(sig.name, value)].decode("utf-8", "replace"), value)
                self.counted[key] = self.counted.get(key, 0) + count
        self.spans.setdefault(sig.name, []).append((begin, finish))
        return True

    def _walk(self, sig: Signature, begin: int, finish: int) -> int:
        """Read a run line by line: the exact way, for runs the counts cannot split."""
        data, position, lines = self.data, begin, 0
        while position < finish:
            lines += 1
            end = data.find(b"\n", position, finish) + 1
            raw = data[position : end - 1]
            fields = sig.match(raw.decode("utf-8", "replace"))
            value = None if fields is None or sig.series is None else sig.series.value_of(fields)
            if value is None:
                self.strays.append(position)
            else:
                writer = _writer(raw).decode("utf-8", "replace")
                key = (sig.name, writer, value)
                self.walked.setdefault(key, Sampled()).see(position)
            position = end
        return lines

    def _starting(self, writer: bytes, begin: int, finish: int) -> int:
        """Lines of [begin, finish) that start with `writer`."""
        data = self.data
        if begin == 0:
            return data.startswith(writer) + byte_counts.count(data, b"\n" + writer, 0, finish - 1)
        return byte_counts.count(data, b"\n" + writer, begin - 1, finish - 1)


def _writer(raw: bytes) -> bytes:
    found = _WRITER_BYTES.match(raw)
    return found.group(0) if found else b""


def _occurrences(
    data: bytes, token: bytes, spans: list[tuple[int, int]], limit: int, *, forward: bool
) -> list[int]:
    """Line starts of the first (or last) `limit` lines holding a token inside the runs."""
    found: list[int] = []
    for begin, finish in spans if forward else reversed(spans):
        while len(found) < limit:
            at = data.find(token, begin, finish) if forward else data.rfind(token, begin, finish)
            if at == -1:
                break
            found.append(data.rfind(b"\n", 0, at) + 1)
            begin, finish = (at + 1, finish) if forward else (begin, at)
        if len(found) == limit:
            break
    return found
