"""The HTML report: one self-contained page (inline CSS and SVG, no script, no network) to
attach to an incident ticket, that still reads at a glance with 4,096 ranks.

The page follows the terminal report's order (verdict and fix first, then where the ranks
stand) and adds the pictures a terminal cannot draw: a map of every rank coloured by its
state with the culprits outlined, the Flight Recorder's stuck groups as rank x sequence
grids, and each rank's first error from the logs. Long lists are cut; --json has them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Generic, TypeVar

from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template

from triage.engine import CLOSE_CALL
from triage.grouping import merged_stacks
from triage.models import Evidence, Finding, Location, RankGroup, Report
from triage.observations import (
    FROp,
    FROverview,
    FRP2PWait,
    FRStuckGroup,
    LogSignal,
    RankProcess,
    RankState,
    TracebackRecord,
)
from triage.observations.log_lines import is_printed
from triage.registry import EvidenceSet, collector_paused
from triage.render import confidence_label, llm_lines, short_path
from triage.render.charts import (
    CELL,
    COLUMNS,
    LABEL_WIDTH,
    Cell,
    Grid,
    Label,
    node_blocks,
    palette,
    positions,
    rank_grid,
)
from triage.text import bound_text, format_nodes, format_ranks

TEMPLATES = Path(__file__).parent / "templates"
T = TypeVar("T")

MAX_CELLS = 16_384  # ranks drawn in the map; the table lists them all
# What the page lists before "N more" (the counts are in the page, the rest in --json).
MAX_EVIDENCE = 200
MAX_EXCERPTS = 4
MAX_GAPS = 50
MAX_NOTES = 50
MAX_STACK_LINES = 80
MAX_FR_GROUPS = 6
MAX_P2P = 20
MAX_ERROR_ROWS = 12
RANKS_WIDTH = 100


@dataclass(frozen=True)
class Capped(Generic[T]):
    """The first items of a list, and how many were left out."""

    items: list[T]
    more: int


@dataclass(frozen=True)
class Other:
    """A hypothesis after the verdict, as one row."""

    index: int
    cause: str
    confidence: str
    ranks: str
    title: str
    close: bool


@dataclass(frozen=True)
class Verdict:
    finding: Finding
    confidence: str
    ranks: str
    nodes: str
    where: str
    also: list[str]
    close_with: Finding | None
    close_confidence: str


@dataclass(frozen=True)
class Swatch:
    """One rank group in the map's legend."""

    colour: str
    state: str
    ranks: str
    count: str
    nodes: str
    where: str
    culprit: bool


@dataclass(frozen=True)
class RankMap:
    width: int
    height: int
    cells: list[Cell]
    culprits: list[Cell]
    labels: list[Label]
    swatches: list[Swatch]
    zoom: int
    by_node: bool
    unseen: bool
    undrawn: int


@dataclass(frozen=True)
class Row:
    """A legend line under a grid: the ranks of one colour and what they show."""

    colour: str
    what: str
    ranks: str
    count: str
    detail: str
    culprit: bool


@dataclass(frozen=True)
class FrGroup:
    title: str
    grid: Grid
    rows: list[Row]
    more_ranks: int


@dataclass(frozen=True)
class FlightRecorder:
    overview: str
    groups: list[FrGroup]
    more_groups: int
    p2p: Capped[str]


@dataclass(frozen=True)
class FirstErrors:
    """Ranks by their first error: a grid row and a legend line per kind of error."""

    grid: Grid
    rows: list[Row]
    more: int


@dataclass(frozen=True)
class StackLine:
    text: str
    children: list[StackLine] = field(default_factory=list)


@dataclass(frozen=True)
class FirstError:
    """A rank's first error line in its logs: where it stands in file order, and what."""

    rank: int
    order: tuple[int, int]
    what: str
    source: str
    text: str


@dataclass(frozen=True)
class EvidenceRow:
    id: str
    rank: str
    kind: str
    summary: str
    source: str


@collector_paused()
def render_html(report: Report, transcript: str = "") -> str:
    """The report as one HTML page, with nothing to fetch: safe to mail and open offline;
    `transcript` (chat's, as markdown) closes the page as text.
    The cycle collector rests meanwhile: the page's view is thousands of small objects and
    no cycles, and its passes over a 4,096-rank report's evidence cost more than the page."""
    evidence = EvidenceSet(report.evidence)
    culprits = set(report.verdict.ranks) if report.verdict else set()
    nodes = _nodes_by_rank(report, evidence)
    return _template().render(
        report=report,
        targets=_targets(report),
        verdict=_verdict(report, nodes),
        others=_others(report),
        rank_map=_rank_map(report, culprits, nodes),
        stacks=_stack_tree(merged_stacks(evidence, limit=MAX_STACK_LINES)),
        flight_recorder=_flight_recorder(evidence, culprits),
        errors=_first_errors(evidence, culprits),
        evidence=_evidence_rows(report),
        excerpts=_excerpts(report),
        gaps=_capped(
            [f"{g.source}: {g.reason}" + (f" ({g.hint})" if g.hint else "") for g in report.gaps],
            MAX_GAPS,
        ),
        notes=_capped(report.notes, MAX_NOTES),
        llm=llm_lines(report.llm) if report.llm else [],
        transcript=transcript,
    )


@cache
def _template() -> Template:
    """Autoescaped: every string on the page comes from logs and dumps, which are untrusted."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2")


def _targets(report: Report) -> str:
    """What was triaged, in one bounded line: a job's pids or files can be thousands."""
    given = "; ".join(
        f"{key}: {', '.join(map(str, value)) if isinstance(value, list) else value}"
        for key, value in report.targets.items()
        if value
    )
    return bound_text(given, 300)


def _capped(items: list[T], limit: int) -> Capped[T]:
    return Capped(items[:limit], max(len(items) - limit, 0))


def _where(location: Location | None) -> str:
    return str(location) if location is not None else "unknown"


def _verdict(report: Report, nodes: dict[int, str]) -> Verdict | None:
    top = report.verdict
    if top is None:
        return None
    runner_up = report.hypotheses[1] if len(report.hypotheses) > 1 else None
    close = runner_up is not None and top.confidence - runner_up.confidence < CLOSE_CALL
    on = sorted({nodes[r] for r in top.ranks if r in nodes})
    return Verdict(
        finding=top,
        confidence=confidence_label(top.confidence),
        ranks=format_ranks(top.ranks, width=RANKS_WIDTH) if top.ranks else "n/a",
        nodes=format_nodes(on, width=RANKS_WIDTH) if on else "",
        where=_where(top.location),
        also=[str(location) for location in top.other_locations],
        close_with=runner_up if close else None,
        close_confidence=confidence_label(runner_up.confidence) if runner_up else "",
    )


def _others(report: Report) -> list[Other]:
    """Every hypothesis after the verdict; the runner-up is flagged when it is a close call."""
    top = report.verdict
    return [
        Other(
            index=index,
            cause=f.cause_id,
            confidence=confidence_label(f.confidence),
            ranks=format_ranks(f.ranks, width=RANKS_WIDTH) if f.ranks else "",
            title=f.title,
            close=index == 2 and top is not None and top.confidence - f.confidence < CLOSE_CALL,
        )
        for index, f in enumerate(report.hypotheses[1:], start=2)
    ]


def _nodes_by_rank(report: Report, evidence: EvidenceSet) -> dict[int, str]:
    """Each rank's node: from its process or stack where a collection named the node, else
    from a group that lives on one node."""
    nodes = {r: g.nodes[0] for g in report.rank_groups if len(set(g.nodes)) == 1 for r in g.ranks}
    named = [p for _, p in evidence.payloads(RankProcess)] + [
        s for _, s in evidence.payloads(RankState)
    ]
    nodes.update((item.rank, item.node) for item in named if item.rank is not None and item.node)
    return nodes


def _culprits_first(groups: list[RankGroup], culprits: set[int]) -> list[RankGroup]:
    """The groups holding the verdict's ranks lead; the rest keep their order (largest first)."""
    return sorted(groups, key=lambda group: culprits.isdisjoint(group.ranks))


def _rank_map(report: Report, culprits: set[int], nodes: dict[int, str]) -> RankMap | None:
    groups = _culprits_first(report.rank_groups, culprits)
    if not groups:
        return None
    colours = palette(not culprits.isdisjoint(g.ranks) for g in groups)
    state: dict[int, tuple[str, str]] = {}
    for group, colour in zip(groups, colours, strict=True):
        for rank in group.ranks:
            state.setdefault(rank, (colour, group.state))
    swatches = [_swatch(g, c, culprits) for g, c in zip(groups, colours, strict=True)]
    top = max(state, default=-1) + 1
    drawn = min(top, MAX_CELLS)
    by_node = any(rank in nodes for rank in range(drawn))
    blocks = node_blocks(range(drawn), nodes) if by_node else [("", list(range(drawn)))]
    places, labels = positions(blocks)
    cells = [_cell(rank, x, y, state.get(rank), nodes.get(rank)) for rank, (x, y) in places]
    return RankMap(
        width=max((x for _, (x, _) in places), default=LABEL_WIDTH) + CELL,
        height=max((y for _, (_, y) in places), default=-CELL) + CELL,
        cells=[c for c in cells if c.rank not in culprits],
        culprits=[c for c in cells if c.rank in culprits],  # drawn last: outlines on top
        labels=labels,
        swatches=swatches,
        zoom=2 if len(places) <= 2 * COLUMNS else 1,  # a few ranks drawn larger
        by_node=by_node,
        unseen=len(state) < drawn,
        undrawn=top - drawn,
    )


def _swatch(group: RankGroup, colour: str, culprits: set[int]) -> Swatch:
    live = [f"pid {p}" for p in group.pids if p > 0]  # stacks from logs have no live pid
    who = format_ranks(group.ranks, width=RANKS_WIDTH) if group.ranks else ", ".join(live[:4])
    return Swatch(
        colour=colour,
        state=group.state,
        ranks=who or "rank ?",
        count=f"{len(group.ranks) + len(group.pids):,}",
        nodes=format_nodes(group.nodes, width=60) if group.nodes else "",
        where=_where(group.location) if group.location else group.detail,
        culprit=not culprits.isdisjoint(group.ranks),
    )


def _cell(rank: int, x: int, y: int, state: tuple[str, str] | None, node: str | None) -> Cell:
    colour, what = state or ("none", "no state seen")
    on = f" on {node}" if node else ""
    return Cell(rank=rank, x=x, y=y, colour=colour, title=f"rank {rank}{on}: {what}")


def _stack_tree(lines: list[str]) -> list[StackLine]:
    """merged_stacks' indented lines (two spaces a level) as a tree to fold and unfold."""
    roots: list[StackLine] = []
    path: list[StackLine] = []
    for line in lines:
        depth = (len(line) - len(line.lstrip(" "))) // 2
        node = StackLine(line.strip())
        del path[depth:]
        (path[-1].children if path else roots).append(node)
        path.append(node)
    return roots


def _flight_recorder(evidence: EvidenceSet, culprits: set[int]) -> FlightRecorder | None:
    """Per stuck process group, the sequence number each rank stands at (root points first)."""
    overview = [item.summary for item, _ in evidence.payloads(FROverview)]
    points = sorted((p for _, p in evidence.payloads(FRStuckGroup)), key=lambda p: not p.root)
    waits = [w for _, w in evidence.payloads(FRP2PWait)]
    if not (overview or points or waits):
        return None
    p2p = [f"rank {rank}: {op.text}" for w in waits for rank, op in sorted(w.ops.items())]
    return FlightRecorder(
        overview="; ".join(overview),
        groups=[_fr_group(p, culprits) for p in points[:MAX_FR_GROUPS]],
        more_groups=max(len(points) - MAX_FR_GROUPS, 0),
        p2p=_capped(p2p, MAX_P2P),
    )


def _fr_group(point: FRStuckGroup, culprits: set[int]) -> FrGroup:
    """Rows are the sequence numbers the group's ranks stand at, the furthest ahead on top."""
    keys = sorted({_seq_key(point, s.op) for s in point.sides}, key=_seq_order)
    colours = palette(not culprits.isdisjoint(s.ranks) for s in point.sides)
    place: dict[int, tuple[int, str]] = {}
    rows = []
    for side, colour in zip(point.sides, colours, strict=True):
        row = keys.index(_seq_key(point, side.op))
        place.update((rank, (row, colour)) for rank in side.ranks)
        op, at = side.op, side.op.location if side.op else None
        detail = (op.text if op else "no op") + (f" at {_where(at)}" if at else "")
        rows.append(
            Row(
                colour=colour,
                what=side.state,
                ranks=format_ranks(side.ranks, width=RANKS_WIDTH),
                count=f"{len(side.ranks):,}",
                detail=detail,
                culprit=not culprits.isdisjoint(side.ranks),
            )
        )
    desc = f" ({point.desc})" if point.desc and point.desc != "undefined" else ""
    title = f"group {point.group}{desc}: {point.members:,} ranks, stuck at seq {point.seq}"
    labels = [_seq_label(key) for key in keys]
    return FrGroup(title, rank_grid(labels, place, culprits), rows, point.more_ranks)


def _seq_key(point: FRStuckGroup, op: FROp | None) -> tuple[str, int] | None:
    """Where a side stands: its op's group (another group's op when blocked elsewhere) and seq."""
    return (op.group if op.group != point.group else "", op.seq) if op is not None else None


def _seq_order(key: tuple[str, int] | None) -> tuple[int, str, int]:
    if key is None:
        return (2, "", 0)
    group, seq = key
    return (1 if group else 0, group, -seq)


def _seq_label(key: tuple[str, int] | None) -> str:
    if key is None:
        return "no op"
    group, seq = key
    return f"group {group} seq {seq}" if group else f"seq {seq}"


def _first_errors(evidence: EvidenceSet, culprits: set[int]) -> FirstErrors | None:
    """Each rank's first error line, rows in the order the first of each was read (file,
    then line: logs carry no timestamps, so only one file's lines are in time order)."""
    firsts = _firsts(evidence)
    if not firsts:
        return None
    kinds: dict[str, list[FirstError]] = {}
    for first in sorted(firsts.values(), key=lambda f: f.order):
        kinds.setdefault(first.what, []).append(first)
    shown = list(kinds.items())[:MAX_ERROR_ROWS]
    colours = palette(any(f.rank in culprits for f in items) for _, items in shown)
    place = {f.rank: (row, colours[row]) for row, (_, items) in enumerate(shown) for f in items}
    rows = [
        Row(
            colour=colour,
            what=what,
            ranks=format_ranks([f.rank for f in items], width=RANKS_WIDTH),
            count=f"{len(items):,}",
            detail=f"first at {items[0].source}: {items[0].text}",
            culprit=any(f.rank in culprits for f in items),
        )
        for (what, items), colour in zip(shown, colours, strict=True)
    ]
    grid = rank_grid([what for what, _ in shown], place, culprits)
    return FirstErrors(grid, rows, max(len(kinds) - MAX_ERROR_ROWS, 0))


def _firsts(evidence: EvidenceSet) -> dict[int, FirstError]:
    """Per rank, its earliest error: files in the order they were read, then lines. Stack
    dumps are not errors: they show where a live rank was."""
    files: dict[str, int] = {}
    firsts: dict[int, FirstError] = {}
    for item, line, what, text in _error_lines(evidence):
        if item.rank is None:
            continue
        order = (files.setdefault(line[0], len(files)), line[1])
        kept = firsts.get(item.rank)
        if kept is None or order < kept.order:
            source = f"{short_path(line[0])}:{line[1]}"
            firsts[item.rank] = FirstError(item.rank, order, what, source, bound_text(text, 200))
    return firsts


def _error_lines(evidence: EvidenceSet) -> Iterable[tuple[Evidence, tuple[str, int], str, str]]:
    for item, signal in evidence.payloads(LogSignal):
        if is_printed(signal.signature):  # a rank's own print or a metric: not an error
            continue
        what = signal.signature + (" (reports a peer)" if signal.peer_symptom else "")
        yield item, (signal.path, signal.line), what, signal.text
    for item, record in evidence.payloads(TracebackRecord):
        if not record.dump:
            what = record.exception or "traceback"
            yield item, (record.path, record.line), what, record.message


def _evidence_rows(report: Report) -> Capped[EvidenceRow]:
    """What the hypotheses cite first: with 10,000 items, the rest is context."""
    cited = {
        eid: n
        for n, eid in enumerate(dict.fromkeys(i for f in report.hypotheses for i in f.evidence))
    }
    ranked = sorted(report.evidence, key=lambda e: cited.get(e.id, len(cited)))
    shown = _capped(ranked, MAX_EVIDENCE)
    rows = [
        EvidenceRow(
            id=e.id,
            rank="" if e.rank is None else str(e.rank),
            kind=e.kind,
            summary=bound_text(e.summary, 300),
            source=short_path(e.source),
        )
        for e in shown.items
    ]
    return Capped(rows, shown.more)


def _excerpts(report: Report) -> list[Evidence]:
    """The raw text behind the verdict, as markdown shows it: a few items, folded."""
    cited = set(report.verdict.evidence) if report.verdict else set()
    return [e for e in report.evidence if e.excerpt and e.id in cited][:MAX_EXCERPTS]
