"""The terminal report: the verdict first, then ranks grouped by state, then the evidence."""

from __future__ import annotations

from collections import Counter

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from triage.grouping import merged_stacks
from triage.models import Evidence, Finding, Location, RankGroup, Report
from triage.registry import EvidenceSet
from triage.render import confidence_label, llm_lines, short_path
from triage.text import bound_text, format_nodes, format_ranks

# One screen (50 lines at 120 columns) holds the report of 4,096 ranks: each list is cut
# with what it left out, and the full lists are in --json and --format markdown.
MAX_GROUP_ROWS = 8
MAX_EVIDENCE_LINES = 6
MAX_GAP_LINES = 5
MAX_NOTE_LINES = 4
RANKS_WIDTH = 40
NODES_WIDTH = 30


def _where(location: Location | None) -> str:
    if location is None:
        return "unknown"
    line = f":{location.line}" if location.line is not None else ""
    func = f" in {location.function}" if location.function else ""
    return f"{location.file}{line}{func}"


def _verdict(finding: Finding | None, symptom: str) -> RenderableType:
    if finding is None:
        return Panel(Text("No hypothesis: see gaps and next steps."), title=f"triage {symptom}")
    body = Text()
    body.append(f"{finding.cause_id}", style="bold red")
    body.append(f"  confidence {confidence_label(finding.confidence)}\n", style="dim")
    body.append(f"{finding.title}\n", style="bold")
    body.append(f"{finding.summary}\n")
    if finding.ranks:
        body.append("Ranks: ", style="bold")
        body.append(f"{format_ranks(finding.ranks, width=100)}\n")
    if finding.location is not None:
        body.append("Where: ", style="bold")
        body.append(f"{_where(finding.location)}\n")
    if finding.fix:
        body.append("Fix: ", style="bold green")
        body.append(finding.fix)
    return Panel(body, title=f"triage {symptom}: verdict", title_align="left", border_style="red")


def _groups(report: Report) -> RenderableType | None:
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
        loc = group.location
        where = f"{short_path(loc.file)}:{loc.line}" if loc else group.detail
        nodes = [format_nodes(group.nodes, width=NODES_WIDTH)] if on_nodes else []
        table.add_row(who, *nodes, group.state, where)
    left = groups[MAX_GROUP_ROWS:]
    if left:
        ranks = sum(len(group.ranks) + len(group.pids) for group in left)
        table.add_row(
            f"... {len(left)} more groups", *([""] if on_nodes else []), f"{ranks:,} ranks"
        )
    return table


def _culprits_first(report: Report) -> list[RankGroup]:
    """The verdict's ranks' groups (and so their nodes) lead; the rest stay largest first."""
    culprits = set(report.verdict.ranks) if report.verdict else set()
    return sorted(report.rank_groups, key=lambda group: culprits.isdisjoint(group.ranks))


def _tree(report: Report) -> RenderableType | None:
    lines = merged_stacks(EvidenceSet(report.evidence), limit=12)
    if len(lines) < 2:
        return None
    text = Text("Merged stacks (ranks share the frames above each split)\n", style="bold")
    for line in lines:
        text.append(f"  {line}\n", style="cyan")
    return text


def _others(report: Report) -> RenderableType | None:
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
            finding.title,
        )
    return table


def _bullets(
    title: str, lines: list[str], style: str = "", wrap: bool = True
) -> RenderableType | None:
    """A titled list; unwrapped, each line is cut to the screen's width."""
    if not lines:
        return None
    text = Text(f"{title}\n", style="bold", no_wrap=not wrap, overflow="ellipsis")
    for line in lines:
        text.append(f"  - {line}\n", style=style)
    return text


def _capped(lines: list[str], limit: int, what: str) -> list[str]:
    if len(lines) <= limit:
        return lines
    return [*lines[: limit - 1], f"... {len(lines) - limit + 1} more {what} (use --json)"]


def _evidence_lines(report: Report) -> list[str]:
    """What the hypotheses cite comes first: with 10,000 files, the rest is context."""
    cited = [i for f in report.hypotheses for i in f.evidence]
    order = {eid: n for n, eid in enumerate(dict.fromkeys(cited))}
    ranked = sorted(report.evidence, key=lambda e: order.get(e.id, len(order)))
    lines: dict[str, list[Evidence]] = {}  # the same line teed into two logs reads once
    for item in ranked:
        who = f"[rank {item.rank}] " if item.rank is not None else ""
        text = f"{who}{item.summary[:160]}"
        if text in lines or len(lines) < MAX_EVIDENCE_LINES:
            lines.setdefault(text, []).append(item)
    shown = [
        f"{text}  ({', '.join(short_path(item.source) for item in items[:2])})"
        for text, items in lines.items()
    ]
    kinds = Counter(item.kind for item in report.evidence)
    kinds.subtract(item.kind for items in lines.values() for item in items)
    left = ", ".join(f"{n:,} {kind}" for kind, n in kinds.most_common() if n > 0)
    if left:
        more = sum(kinds.values())
        shown.append(f"... {more:,} more: {left} (use --json or --format markdown)")
    return shown


def _llm(report: Report) -> RenderableType | None:
    if report.llm is None:
        return None
    lines = llm_lines(report.llm)
    if report.llm.explanation:
        lines.append(f"explanation: {bound_text(report.llm.explanation, 1200)}")
    return _bullets("LLM review", lines, "magenta")


def build(report: Report) -> Group:
    gaps = [f"{g.source}: {g.reason}" + (f" ({g.hint})" if g.hint else "") for g in report.gaps]
    fix = report.verdict.fix if report.verdict else ""
    steps = [step for step in report.next_steps if not (fix and step.endswith(fix))]
    parts = [
        _verdict(report.verdict, report.symptom),
        _groups(report),
        _tree(report),
        _others(report),
        _bullets("Evidence", _evidence_lines(report), "dim", wrap=False),
        _bullets("Gaps (not seen)", _capped(gaps, MAX_GAP_LINES, "gaps"), "yellow"),
        _bullets("Next steps", steps),  # the verdict above says its fix
        _bullets("Notes", _capped(report.notes, MAX_NOTE_LINES, "notes"), "dim"),
        _llm(report),
    ]
    return Group(*[p for p in parts if p is not None])


def print_report(report: Report, console: Console | None = None) -> None:
    (console or Console()).print(build(report))
