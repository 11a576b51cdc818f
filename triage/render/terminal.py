"""The terminal report: the verdict first, then ranks grouped by state, then the evidence.

Calm at 80 columns: a long path prefix is named once in the verdict box and every path
under it is shown relative to it; list items wrap under their own text (a hanging indent)
and are never cut inside a word.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from triage.grouping import merged_stacks
from triage.models import Evidence, Finding, Location, RankGroup, Report
from triage.printable import visible_controls
from triage.registry import EvidenceSet
from triage.render import confidence_label, llm_lines, path_root, under_root
from triage.text import bound_text, cut_at_word, format_nodes, format_ranks, plural

# One screen (50 lines at 120 columns) holds the report of 4,096 ranks: each list is cut
# with what it left out, and the full lists are in --json and --format markdown.
MAX_GROUP_ROWS = 8
MAX_EVIDENCE_LINES = 6
MAX_GAP_LINES = 5
MAX_NOTE_LINES = 4
RANKS_WIDTH = 40
NODES_WIDTH = 30
#: An evidence line longer than this is cut at a word, with '…'. Tools bound a log line's
#: summary to its signature and 200 characters, which stay whole: the op of a watchdog
#: timeout sits near their end.
EVIDENCE_CHARS = 240
BULLET = "  - "
_TREE_LINE = re.compile(r"^(\s*)(\[[^\]]*\] )?(.*)$")


def _where(location: Location | None) -> str:
    if location is None:
        return "unknown"
    line = f":{location.line}" if location.line is not None else ""
    func = f" in {location.function}" if location.function else ""
    return f"{location.file}{line}{func}"


def _verdict(finding: Finding | None, symptom: str, root: str) -> RenderableType:
    """The verdict box; its last line names the folder the report's paths are under."""
    named = Text(f"Paths under {root}", style="dim") if root else None
    if finding is None:
        body = Text("No hypothesis: see gaps and next steps.")
        if named:
            body.append("\n").append_text(named)
        return Panel(body, title=f"triage {symptom}")
    body = Text()
    body.append(f"{finding.cause_id}", style="bold red")
    body.append(f"  confidence {confidence_label(finding.confidence)}\n", style="dim")
    body.append(f"{under_root(finding.title, root)}\n", style="bold")
    body.append(f"{under_root(finding.summary, root)}\n")
    if finding.ranks:
        body.append("Ranks: ", style="bold")
        body.append(f"{format_ranks(finding.ranks, width=100)}\n")
    if finding.location is not None:
        body.append("Where: ", style="bold")
        body.append(f"{under_root(_where(finding.location), root)}\n")
    if finding.fix:
        body.append("Fix: ", style="bold green")
        body.append(f"{under_root(finding.fix, root)}\n")
    if named:
        body.append_text(named)
    body.rstrip()
    return Panel(body, title=f"triage {symptom}: verdict", title_align="left", border_style="red")


def _groups(report: Report, root: str) -> RenderableType | None:
    if not report.rank_groups:
        return None
    table = Table(title="Ranks by state", title_justify="left", expand=False, show_edge=False)
    on_nodes = any(group.nodes for group in report.rank_groups)
    table.add_column("ranks", no_wrap=True)
    if on_nodes:
        table.add_column("nodes", overflow="fold")
    table.add_column("state")
    table.add_column("where", overflow="fold")
    groups = _culprits_first(report)
    for group in groups[:MAX_GROUP_ROWS]:
        who = format_ranks(group.ranks, width=RANKS_WIDTH) if group.ranks else ""
        pids = [p for p in group.pids if p > 0]  # stacks read from a log have no live pid
        if pids:
            who = (who + " " if who else "") + "pid " + ",".join(map(str, pids[:4]))
        who = who or "rank ?"
        nodes = [format_nodes(group.nodes, width=NODES_WIDTH)] if on_nodes else []
        table.add_row(who, *nodes, group.state, under_root(_group_where(group), root))
    left = groups[MAX_GROUP_ROWS:]
    if left:
        ranks = sum(len(group.ranks) + len(group.pids) for group in left)
        table.add_row(
            f"... {plural(len(left), 'more group')}",
            *([""] if on_nodes else []),
            plural(ranks, "rank"),
        )
    return table


def _group_where(group: RankGroup) -> str:
    loc = group.location
    return f"{loc.file}:{loc.line}" if loc else group.detail


def _culprits_first(report: Report) -> list[RankGroup]:
    """The verdict's ranks' groups (and so their nodes) lead; the rest stay largest first."""
    culprits = set(report.verdict.ranks) if report.verdict else set()
    return sorted(report.rank_groups, key=lambda group: culprits.isdisjoint(group.ranks))


def _tree(report: Report) -> RenderableType | None:
    lines = merged_stacks(EvidenceSet(report.evidence), limit=12)
    if len(lines) < 2:
        return None
    rows: list[RenderableType] = [
        Text("Merged stacks (ranks share the frames above each split)", style="bold")
    ]
    for line in lines:  # a wrapped line continues under its frames, right of its ranks
        match = _TREE_LINE.match(line)
        indent, ranks, frames = match.groups() if match else ("", "", line)
        head = Text(" " * (2 + len(indent)) + (ranks or ""), style="cyan")
        rows.append(_Hanging(head, Text(frames, style="cyan")))
    return Group(*rows, Text())


def _others(report: Report, root: str) -> RenderableType | None:
    if len(report.hypotheses) < 2:
        return None
    table = Table(title="Other hypotheses", title_justify="left", show_edge=False)
    table.add_column("#")
    table.add_column("cause")
    table.add_column("conf")
    table.add_column("ranks")
    table.add_column("title", overflow="fold")
    for index, finding in enumerate(report.hypotheses[1:], start=2):
        table.add_row(
            str(index),
            finding.cause_id,
            confidence_label(finding.confidence),
            format_ranks(finding.ranks, width=RANKS_WIDTH) if finding.ranks else "",
            under_root(finding.title, root),
        )
    return table


@dataclass(frozen=True)
class _Hanging:
    """A head ('  - ', '[1-3] ') and a text that wraps under itself, not under the head,
    breaking between words: a list stays readable at 80 columns."""

    head: Text
    text: Text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = self.text.wrap(console, max(options.max_width - len(self.head), 10))
        for number, line in enumerate(lines):
            line.rstrip()
            yield Text.assemble(self.head if number == 0 else " " * len(self.head), line)


def _bullets(title: str, lines: list[str], style: str = "") -> RenderableType | None:
    """A titled list whose items wrap with a hanging indent."""
    if not lines:
        return None
    items = [_Hanging(Text(BULLET, style=style), Text(line, style=style)) for line in lines]
    return Group(Text(title, style="bold"), *items, Text())


def _capped(lines: list[str], limit: int, what: str) -> list[str]:
    if len(lines) <= limit:
        return lines
    return [
        *lines[: limit - 1],
        f"... {plural(len(lines) - limit + 1, 'more ' + what)} (use --json)",
    ]


def _evidence_lines(report: Report) -> list[str]:
    """What the hypotheses cite comes first: with 10,000 files, the rest is context."""
    cited = [i for f in report.hypotheses for i in f.evidence]
    order = {eid: n for n, eid in enumerate(dict.fromkeys(cited))}
    ranked = sorted(report.evidence, key=lambda e: order.get(e.id, len(order)))
    lines: dict[str, list[Evidence]] = {}  # the same line teed into two logs reads once
    for item in ranked:
        text = cut_at_word(_said_with_rank(item), EVIDENCE_CHARS)
        if text in lines or len(lines) < MAX_EVIDENCE_LINES:
            lines.setdefault(text, []).append(item)
    shown = [
        f"{text}  ({', '.join(item.source for item in items[:2])})" for text, items in lines.items()
    ]
    kinds = Counter(item.kind for item in report.evidence)
    kinds.subtract(item.kind for items in lines.values() for item in items)
    left = ", ".join(f"{n:,} {kind}" for kind, n in kinds.most_common() if n > 0)
    if left:
        more = sum(kinds.values())
        shown.append(f"... {more:,} more: {left} (use --json or --format markdown)")
    return shown


def _said_with_rank(item: Evidence) -> str:
    """The summary, led by its rank unless it names the rank itself ('rank 2: ...')."""
    if item.rank is None or re.match(rf"ranks? {item.rank}\b", item.summary):
        return item.summary
    return f"[rank {item.rank}] {item.summary}"


def _llm(report: Report) -> RenderableType | None:
    if report.llm is None:
        return None
    lines = llm_lines(report.llm)
    if report.llm.explanation:
        lines.append(f"explanation: {bound_text(report.llm.explanation, 1200)}")
    return _bullets("LLM review", lines, "magenta")


def build(report: Report) -> Group:
    fix = report.verdict.fix if report.verdict else ""
    steps = [step for step in report.next_steps if not (fix and step.endswith(fix))]
    evidence = _evidence_lines(report)
    # a gap's hint is a next step already, or left out there as not fitting this job
    gaps = _capped([f"{g.source}: {g.reason}" for g in report.gaps], MAX_GAP_LINES, "gap")
    notes = _capped(report.notes, MAX_NOTE_LINES, "note")
    root = _root(report, [*evidence, *gaps, *steps, *notes])
    parts = [
        _verdict(report.verdict, report.symptom, root),
        _groups(report, root),
        _tree(report),
        _others(report, root),
        _bullets("Evidence", [under_root(line, root) for line in evidence], "dim"),
        _bullets("Gaps (not seen)", [under_root(line, root) for line in gaps], "yellow"),
        _bullets("Next steps", [under_root(s, root) for s in steps]),  # the verdict says its fix
        _bullets("Notes", [under_root(note, root) for note in notes], "dim"),
        _llm(report),
    ]
    return Group(*[p for p in parts if p is not None])


def _root(report: Report, lines: list[str]) -> str:
    """The one folder the printed paths are shown under, chosen from the paths the report
    names (the verdict's, the groups', the evidence's and the gaps' sources) by what it
    saves: in the verdict box first, where a long path repeats most, else in all printed."""
    verdict = report.verdict
    locations = [verdict.location, *verdict.other_locations] if verdict else []
    groups = [group.location for group in report.rank_groups]
    paths = [loc.file for loc in [*locations, *groups] if loc is not None]
    paths += [item.source.rsplit(":", 1)[0] for item in report.evidence]
    paths += [gap.source for gap in report.gaps]
    boxed = (
        [verdict.title, verdict.summary, _where(verdict.location), verdict.fix] if verdict else []
    )
    wheres = [_group_where(group) for group in report.rank_groups[:MAX_GROUP_ROWS]]
    unique = list(dict.fromkeys(paths))
    return path_root(unique, boxed) or path_root(unique, [*boxed, *wheres, *lines])


def print_report(report: Report, console: Console | None = None) -> None:
    """Print the report; the control characters of the text it shows (an escape sequence in
    a file name or a log line) come out as `\\x1b`, and only rich's own styles are sent."""
    console = console or Console()
    segments = [
        segment if segment.control else Segment(visible_controls(segment.text), segment.style)
        for segment in console.render(build(report))
    ]
    console.print(Segments(segments), end="")
