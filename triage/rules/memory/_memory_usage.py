"""Memory a training loop prints every step, read as one series per writer, and whether
it rises steadily: the leak rule's view of the logs.

Per-step memory lines (`triage.readers.signatures.memory.USAGE_SIGNALS`) are grouped by
writer, file and format; each group keeps the most telling figure its lines carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from triage.models import Evidence
from triage.observations import LogSignal
from triage.readers.signatures.memory import USAGE_SIGNALS
from triage.registry import EvidenceSet
from triage.rules.logs._signals import signals
from triage.rules.memory._oom_events import GiB, MiB, int_field


@dataclass(frozen=True)
class UsagePoint:
    """One log line's memory figure, in bytes."""

    line: int
    step: int | None
    value: int
    evidence: str


@dataclass
class UsageSeries:
    """One writer's memory figure of one kind (allocated, reserved, ...), in log order."""

    path: str
    rank: int | None
    local_rank: int | None
    signature: str
    metric: str
    points: list[UsagePoint]

    def who(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.local_rank is not None:
            return f"local rank {self.local_rank}"
        return "the process"


_MIN_POINTS = 5
_NOISE = 64 * MiB  # below this a change is rounding or jitter ("10.2 GB" is +-50 MiB)


@dataclass(frozen=True)
class Rise:
    """How a series' floor rose: overall, and over its second half (still rising at the end)."""

    start: UsagePoint
    end: UsagePoint
    growth: int
    tail_start: UsagePoint
    tail_growth: int


def steady_rise(series: UsageSeries) -> Rise | None:
    """Steady growth of a rank's memory across its log lines, or None.

    A leak rises line after line and keeps rising until the end; warm-up (optimizer state,
    the cache filling) rises fast and stops; noise goes up and down; a big batch jumps once.
    So: at most a quarter of the lines lower than the one before; the floor (the least value
    from each line on, which one spike does not move) up by 1 GiB and 20%; and over the
    second half of the lines still up by 256 MiB, no single rise making two thirds of that,
    at least a quarter as fast as over the whole. Steps, else line numbers, measure how
    fast, so the lines a scan keeps from the start and the end of a long log compare fairly.
    """
    points = series.points
    n = len(points)
    if n < _MIN_POINTS:
        return None
    values = [p.value for p in points]
    if sum(1 for a, b in zip(values, values[1:], strict=False) if b < a - _NOISE) > (n - 1) // 4:
        return None
    floor = values[:]
    for i in range(n - 2, -1, -1):
        floor[i] = min(floor[i], floor[i + 1])
    growth = floor[-1] - floor[0]
    if growth < max(GiB, floor[0] // 5):
        return None
    tail = n - max(3, (n + 1) // 2)
    tail_growth = floor[-1] - floor[tail]
    jump = max(b - a for a, b in zip(floor[tail:], floor[tail + 1 :], strict=False))
    if tail_growth < 256 * MiB or jump * 3 > tail_growth * 2:
        return None
    xs = [p.line for p in points]
    steps = [p.step for p in points]
    if all(
        b is not None and a is not None and a < b for a, b in zip(steps, steps[1:], strict=False)
    ):
        xs = [p.step or 0 for p in points]
    span, tail_span = xs[-1] - xs[0], xs[-1] - xs[tail]
    if span <= 0 or tail_span <= 0 or tail_growth * span < 0.25 * growth * tail_span:
        return None
    start = values.index(floor[0])
    return Rise(points[start], points[-1], growth, points[tail], tail_growth)


_USAGE_METRICS = ("allocated", "peak_allocated", "memory", "reserved", "peak_reserved")


def usage_series(evidence: EvidenceSet) -> list[UsageSeries]:
    """Per-step memory lines grouped by writer, file and format; each group keeps the most
    telling figure its lines carry (allocated before peaks, reserved last)."""
    groups: dict[tuple[object, ...], list[tuple[Evidence, LogSignal]]] = {}
    for ev, sig in signals(evidence, *USAGE_SIGNALS):
        device = sig.fields.get("device")
        key = (sig.path, sig.rank, sig.local_rank, sig.pid, sig.signature, device)
        groups.setdefault(key, []).append((ev, sig))
    out = []
    for items in groups.values():
        items.sort(key=lambda pair: pair[1].line)
        metric = next(
            (
                m
                for m in _USAGE_METRICS
                if sum(int_field(s.fields, m) is not None for _, s in items) * 5 >= len(items) * 4
            ),
            None,
        )
        if metric is None:
            continue
        points = [
            UsagePoint(s.line, int_field(s.fields, "step"), value, ev.id)
            for ev, s in items
            if (value := int_field(s.fields, metric)) is not None
        ]
        first = items[0][1]
        out.append(
            UsageSeries(first.path, first.rank, first.local_rank, first.signature, metric, points)
        )
    return out
