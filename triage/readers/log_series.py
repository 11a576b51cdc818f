"""Frequent lines folded into series: how many, where they start and stop, how far they got.

A frequent signature (NCCL's per-op COLL lines) names a series per line (its
communicator). Each series keeps its count, its first few and last few lines as signals
(the rules read those as they read any signal: the last opCount a rank reached on a
communicator is the lagging rank's evidence) and nothing else, so a log of millions of
such lines costs a few signals per communicator. Lines arrive both one by one (context of
an anchor, a line that ends the file) and as parts the first pass counted in bulk.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from triage.observations.log_lines import LogSignal
from triage.readers.log_runs import SERIES_FIRST, SERIES_LAST, Key

#: A kept line of a series, as read: its number and its text, prefixes and all.
Sample = tuple[int, str]


@dataclass
class Tally:
    """One series of one file: one writer's lines of one key (a communicator). Its lines
    are kept as text and read into signals once the file is done (`signals`): a file of
    many stretches reads 15 lines a series, not 15 a stretch."""

    signature: str
    writer: str
    key: str
    count: int = 0
    first: list[Sample] = field(default_factory=list)
    last: deque[Sample] = field(default_factory=lambda: deque(maxlen=SERIES_LAST))
    #: The kept lines as signals, first to last; set when the file is done.
    signals: list[LogSignal] = field(default_factory=list)

    def keep(self, sample: Sample) -> None:
        """Keep a line in order: among the first few, else among the last few."""
        if len(self.first) < SERIES_FIRST:
            self.first.append(sample)
        elif sample[0] > self.first[-1][0] and (not self.last or sample[0] > self.last[-1][0]):
            self.last.append(sample)

    def kept(self) -> list[Sample]:
        return self.first + list(self.last)

    @property
    def latest(self) -> LogSignal:
        return self.signals[-1]


class SeriesBook:
    """The series of one file, fed stretch by stretch in file order."""

    def __init__(self) -> None:
        self.tallies: dict[Key, Tally] = {}
        self._stretch: list[tuple[Sample, Key, bool]] = []

    def add(self, sample: Sample, key: Key, *, counted: bool = True) -> None:
        """A line of the current stretch; `counted` lines add to the count themselves, the
        samples of a bulk part do not (`add_count` adds theirs)."""
        self._stretch.append((sample, key, counted))

    def add_count(self, key: Key, count: int) -> None:
        self._tally(key).count += count

    def close_stretch(self) -> None:
        """Keep the stretch's lines in line order (its parts and single lines interleave)."""
        seen: set[tuple[Key, int]] = set()
        for sample, key, counted in sorted(self._stretch, key=lambda item: item[0][0]):
            tally = self._tally(key)
            if counted:
                tally.count += 1
            if (key, sample[0]) not in seen:
                seen.add((key, sample[0]))
                tally.keep(sample)
        self._stretch = []

    def _tally(self, key: Key) -> Tally:
        found = self.tallies.get(key)
        if found is None:
            found = self.tallies[key] = Tally(*key)
        return found
