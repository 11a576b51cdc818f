"""The terminal report: the verdict first, then ranks grouped by state, then the evidence."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from triage.grouping import merged_stacks
from triage.models import Finding, Location, Report
from triage.registry import EvidenceSet
from triage.render import confidence_label, llm_lines, short_path
from triage.text import bound_text, format_nodes, format_ranks

MAX_EVIDENCE_LINES = 12


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
        body.append(f"{format_ranks(finding.ranks)}\n")
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
    for group in report.rank_groups:
        who = format_ranks(group.ranks) if group.ranks else ""
        pids = [p for p in group.pids if p > 0]  # stacks read from a log have no live pid
        if pids:
            who = (who + " " if who else "") + "pid " + ",".join(map(str, pids[:4]))
        who = who or "rank ?"
        loc = group.location
        where = f"{short_path(loc.file)}:{loc.line}" if loc else group.detail
        nodes = [format_nodes(group.nodes)] if on_nodes else []
        table.add_row(who, *nodes, group.state, where)
    return table


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
            format_ranks(finding.ranks) if finding.ranks else "",
            finding.title,
        )
    return table


def _bullets(title: str, lines: list[str], style: str = "") -> RenderableType | None:
    if not lines:
        return None
    text = Text(f"{title}\n", style="bold")
    for line in lines:
        text.append(f"  - {line}\n", style=style)
    return text


def _evidence_lines(report: Report) -> list[str]:
    """What the hypotheses cite comes first: with 10,000 files, the rest is context."""
    cited = [i for f in report.hypotheses for i in f.evidence]
    order = {eid: n for n, eid in enumerate(dict.fromkeys(cited))}
    ranked = sorted(report.evidence, key=lambda e: order.get(e.id, len(order)))
    lines: dict[str, list[str]] = {}  # the same line teed into two logs reads once
    for item in ranked:
        who = f"[rank {item.rank}] " if item.rank is not None else ""
        text = f"{who}{item.summary[:160]}"
        if text in lines or len(lines) < MAX_EVIDENCE_LINES:
            lines.setdefault(text, []).append(short_path(item.source))
    shown = [f"{text}  ({', '.join(sources[:2])})" for text, sources in lines.items()]
    left = len(report.evidence) - sum(len(sources) for sources in lines.values())
    if left > 0:
        shown.append(f"... {left} more (use --json or --format markdown)")
    return shown


def _llm(report: Report) -> RenderableType | None:
    if report.llm is None:
        return None
    lines = llm_lines(report.llm)
    if report.llm.explanation:
        lines.append(f"explanation: {bound_text(report.llm.explanation, 1200)}")
    return _bullets("LLM review", lines, "magenta")


def build(report: Report) -> Group:
    evidence = _evidence_lines(report)
    gaps = [f"{g.source}: {g.reason}" + (f" ({g.hint})" if g.hint else "") for g in report.gaps]
    parts = [
        _verdict(report.verdict, report.symptom),
        _groups(report),
        _tree(report),
        _others(report),
        _bullets("Evidence", evidence, "dim"),
        _bullets("Gaps (not seen)", gaps, "yellow"),
        _bullets("Next steps", report.next_steps),
        _bullets("Notes", report.notes, "dim"),
        _llm(report),
    ]
    return Group(*[p for p in parts if p is not None])


def print_report(report: Report, console: Console | None = None) -> None:
    (console or Console()).print(build(report))
