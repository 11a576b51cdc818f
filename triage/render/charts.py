"""The HTML report's pictures as geometry: where each rank's cell or run goes and which
colour it takes, in SVG user units. The page (`triage.render.html`) says what to draw."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from triage.text import format_ranks

# The rank map: 64 cells a row (4,096 ranks are a 64 x 64 square), a node's ranks together.
COLUMNS = 64
CELL = 10
GAP = 3
LABEL_WIDTH = 90
# Grids of ranks x rows (Flight Recorder sequence numbers, first errors): ranks share a width.
GRID_WIDTH = 640
GRID_CELL = 20.0
ROW_HEIGHT = 16
MIN_RUN = 4.0
ROW_LABEL = 40
CHAR_WIDTH = 6.2  # of the 10px monospace labels
# Colours: ranks with a culprit among them are hot, the others cool; the last one repeats.
HOT = ("h0", "h1", "h2")
COOL = ("c0", "c1", "c2", "c3", "c4", "c5")
MAX_AXIS_MARKS = 3


@dataclass(frozen=True)
class Cell:
    """One rank's square in the map."""

    rank: int
    x: int
    y: int
    colour: str
    title: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class Run:
    """Ranks side by side in one row of a grid, in one colour: one rect however many."""

    x: float
    y: int
    width: float
    colour: str
    title: str
    culprit: bool


@dataclass(frozen=True)
class Grid:
    """Ranks across, one row per key (a sequence number, an error), runs of equal cells."""

    width: int
    height: int
    rows: list[Label]
    runs: list[Run]
    axis: list[Label]


def palette(hot: Iterable[bool]) -> list[str]:
    """A colour per item: hot ones (holding a culprit) red to orange, the rest cool."""
    out: list[str] = []
    used = {True: 0, False: 0}
    for flag in hot:
        colours = HOT if flag else COOL
        out.append(colours[min(used[flag], len(colours) - 1)])
        used[flag] += 1
    return out


def node_blocks(ranks: range, nodes: dict[int, str]) -> list[tuple[str, list[int]]]:
    """Ranks by node, nodes in order of their first rank; ranks of no known node last."""
    blocks: dict[str, list[int]] = {}
    for rank in ranks:
        blocks.setdefault(nodes.get(rank, "node ?"), []).append(rank)
    unknown = blocks.pop("node ?", [])
    return [*blocks.items(), *([("node ?", unknown)] if unknown else [])]


def positions(
    blocks: list[tuple[str, list[int]]],
) -> tuple[list[tuple[int, tuple[int, int]]], list[Label]]:
    """Cells row by row, a block (a node's ranks) kept on one row when it fits, a gap between
    blocks; each row is labelled with the node (or the first rank) it starts with."""
    places: list[tuple[int, tuple[int, int]]] = []
    labels: list[Label] = []
    column, row, gaps = 0, -1, 0
    for name, ranks in blocks:
        if row < 0 or (column and column + len(ranks) > COLUMNS):
            column, row, gaps = 0, row + 1, 0
            labels.append(Label(0, row * CELL + CELL - 1, name or f"rank {ranks[0]}"))
        elif column:
            gaps += 1
        for rank in ranks:
            if column == COLUMNS:
                column, row, gaps = 0, row + 1, 0
                labels.append(Label(0, row * CELL + CELL - 1, name or f"rank {rank}"))
            places.append((rank, (LABEL_WIDTH + column * CELL + gaps * GAP, row * CELL)))
            column += 1
    return places, labels


def rank_grid(rows: list[str], place: dict[int, tuple[int, str]], culprits: set[int]) -> Grid:
    """Ranks in order across (a run of equal neighbours is one rect, a lone culprit at least
    `MIN_RUN` wide), a row per label; `place` gives each rank its row and colour."""
    members = sorted(place)
    step = min(GRID_CELL, GRID_WIDTH / max(len(members), 1))
    left = min(
        max(LABEL_WIDTH, CHAR_WIDTH * max(map(len, rows), default=0)), CHAR_WIDTH * ROW_LABEL
    )
    runs: list[Run] = []
    start = 0
    for end in range(1, len(members) + 1):
        key = _run_key(members[start], place, culprits)
        if end < len(members) and _run_key(members[end], place, culprits) == key:
            continue
        row, colour, culprit = key
        ranks = members[start:end]
        title = f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks, width=60)}"
        x, width = round(left + start * step, 1), round(max(len(ranks) * step, MIN_RUN), 1)
        runs.append(Run(x, row * ROW_HEIGHT, width, colour, title, culprit))
        start = end
    height = len(rows) * ROW_HEIGHT
    return Grid(
        width=round(left + len(members) * step + 60),
        height=height + 14,
        rows=[
            Label(0, i * ROW_HEIGHT + ROW_HEIGHT - 4, text[:ROW_LABEL])
            for i, text in enumerate(rows)
        ],
        runs=runs,
        axis=_axis(members, runs, left, step, height + 12),
    )


def _run_key(
    rank: int, place: dict[int, tuple[int, str]], culprits: set[int]
) -> tuple[int, str, bool]:
    row, colour = place[rank]
    return row, colour, rank in culprits


def _axis(members: list[int], runs: list[Run], left: float, step: float, y: int) -> list[Label]:
    """Ranks under the grid: the culprits, the first and the last, and every rank where the
    columns are wide; a mark that would overlap one placed before it is left out."""
    marks = [Label(r.x, y, r.title) for r in runs if r.culprit][:MAX_AXIS_MARKS]
    wide = step >= GRID_CELL
    for index, rank in enumerate(members):
        if wide or index in (0, len(members) - 1):
            marks.append(Label(round(left + index * step, 1), y, str(rank)))
    kept: list[Label] = []
    for mark in marks:
        if all(_apart(mark, other) for other in kept):
            kept.append(mark)
    return sorted(kept, key=lambda mark: mark.x)


def _apart(one: Label, other: Label) -> bool:
    """Whether two marks on one line do not overlap (a mark is as wide as its text and a space)."""
    first, second = sorted((one, other), key=lambda mark: mark.x)
    return first.x + (len(first.text) + 1) * CHAR_WIDTH <= second.x
