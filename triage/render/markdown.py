"""The markdown report, for pasting into an incident ticket."""

from __future__ import annotations

from triage.grouping import merged_stacks
from triage.models import LlmRun, Report
from triage.registry import EvidenceSet
from triage.render import call_signature, confidence_label, llm_lines
from triage.text import format_nodes, format_ranks


def render_markdown(report: Report) -> str:
    out = [f"# triage {report.symptom} report", ""]
    verdict = report.verdict
    if verdict:
        out += [
            f"**Verdict:** `{verdict.cause_id}` ({confidence_label(verdict.confidence)}): {verdict.title}",
            "",
            verdict.summary,
            "",
            f"- **Ranks:** {format_ranks(verdict.ranks) if verdict.ranks else 'n/a'}",
            f"- **Where:** `{verdict.location}`" if verdict.location else "- **Where:** unknown",
            f"- **Fix:** {verdict.fix}",
            "",
        ]
    else:
        out += ["**Verdict:** none (see gaps and next steps)", ""]
    if len(report.hypotheses) > 1:
        out += [
            "## Other hypotheses",
            "",
            "| # | cause | confidence | ranks | title |",
            "|---|---|---|---|---|",
        ]
        for i, f in enumerate(report.hypotheses[1:], start=2):
            ranks = format_ranks(f.ranks) if f.ranks else ""
            out.append(
                f"| {i} | `{f.cause_id}` | {confidence_label(f.confidence)} | {ranks} | {f.title} |"
            )
        out.append("")
    if report.rank_groups:
        on_nodes = any(g.nodes for g in report.rank_groups)
        columns = ["ranks", "nodes", "state", "where"] if on_nodes else ["ranks", "state", "where"]
        out += ["## Ranks by state", "", f"| {' | '.join(columns)} |", "|---" * len(columns) + "|"]
        for g in report.rank_groups:
            live = [f"pid {p}" for p in g.pids if p > 0]  # stacks from logs have no live pid
            who = format_ranks(g.ranks) if g.ranks else ", ".join(live) or "rank ?"
            nodes = f" {format_nodes(g.nodes)} |" if on_nodes else ""
            where = f"`{g.location}`" if g.location else g.detail
            out.append(f"| {who} |{nodes} {g.state} | {where} |")
        out.append("")
    tree = merged_stacks(EvidenceSet(report.evidence))
    if tree:
        out += ["## Merged stacks", "", "```", *tree, "```", ""]
    if report.evidence:
        out += ["## Evidence", ""]
        for e in report.evidence:
            out.append(f"- `{e.id}`: {e.summary}")
        excerpts = [
            e
            for e in report.evidence
            if e.excerpt and e.id in (verdict.evidence if verdict else [])
        ]
        for e in excerpts[:4]:
            out += [
                "",
                f"<details><summary>{e.id}</summary>",
                "",
                "```",
                e.excerpt or "",
                "```",
                "</details>",
            ]
        out.append("")
    if report.gaps:
        out += (
            ["## Gaps", ""]
            + [
                f"- {g.source}: {g.reason}" + (f" ({g.hint})" if g.hint else "")
                for g in report.gaps
            ]
            + [""]
        )
    if report.next_steps:
        out += ["## Next steps", ""] + [f"1. {s}" for s in report.next_steps] + [""]
    if report.notes:
        out += ["## Notes", ""] + [f"- {note}" for note in report.notes] + [""]
    out += ["## Tool runs", "", "| tool | status | seconds |", "|---|---|---|"]
    out += [f"| {r.tool} | {r.status.value} | {r.duration_s:.2f} |" for r in report.tool_runs]
    if report.llm is not None:
        out += ["", *llm_section(report.llm)]
    return "\n".join(out) + "\n"


def llm_section(run: LlmRun) -> list[str]:
    """What the model did, for the ticket: outcome, tokens, each tool call it made."""
    head, usage = llm_lines(run)[:2]
    out = ["## LLM review", "", f"- **Model:** {head}", f"- **Usage:** {usage}"]
    if run.explanation:
        out += ["", "> " + run.explanation.replace("\n", "\n> ")]
    if run.tool_calls:
        out += ["", "| tool call | status | evidence |", "|---|---|---|"]
        for call in run.tool_calls:
            status = call.status + (f": {call.detail}" if call.detail else "")
            out.append(
                f"| `{_cell(call_signature(call))}` | {_cell(status)} | {len(call.evidence_ids)} |"
            )
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
