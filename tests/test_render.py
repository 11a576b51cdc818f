"""Renderers: the verdict first, readable at 80 columns, markdown for tickets, JSON round trip."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tests.test_hang_rules import report_of, source, state
from triage.models import Evidence, Finding, Gap, RankGroup, Report
from triage.render import render_json
from triage.render.markdown import render_markdown
from triage.render.terminal import print_report


def sample(tmp_path: Path) -> Report:
    f = source(tmp_path)
    return report_of(
        state(0, "broadcast", f, 8), *(state(r, "all_reduce", f, 6) for r in (1, 2, 3))
    )


def test_terminal_puts_the_verdict_first_and_fits_80_columns(tmp_path: Path) -> None:
    out = io.StringIO()
    print_report(sample(tmp_path), Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "hang.mismatched_collective" in lines[1]
    assert text.index("Ranks by state") < text.index("Evidence")
    assert "Merged stacks" in text


def test_terminal_cuts_every_list_to_one_screen_with_the_culprits_group_first() -> None:
    """40 states over 512 nodes, scattered ranks, 30 gaps, 5,000 evidence items, 12 notes."""
    nodes = [f"node{n:03d}" for n in range(1, 513)]
    groups = [
        RankGroup(state=f"state {g}", ranks=list(range(g, 4096, 40)), nodes=nodes[g::40])
        for g in range(40)
    ]
    culprit = Finding(title="t", summary="s", ranks=[39], confidence=0.9, evidence=["e4999"])
    report = Report(
        symptom="hang",
        playbook="hang",
        hypotheses=[culprit],
        rank_groups=groups,
        evidence=[
            Evidence(id=f"e{n}", kind="log_signal", source="a.log", rank=n, summary=f"at {n}")
            for n in range(5000)
        ],
        gaps=[Gap(source=f"node{n:03d} pid 7", reason="gone") for n in range(30)],
        notes=[f"note {n}" for n in range(12)],
    )
    out = io.StringIO()
    print_report(report, Console(file=out, width=120, color_system=None))
    lines = out.getvalue().splitlines()
    assert len(lines) <= 50, "\n".join(lines)
    rows = [line for line in lines if "│" in line and not line.startswith("│")]
    assert "39,79,119,159,199,239,... (102 ranks)" in rows[0]  # the culprit's group first
    assert "node[040,080,...] (12 nodes)" in rows[0] and "... 32 more groups" in rows[-1]
    assert "[rank 4999] at 4999" in out.getvalue()  # what the verdict cites comes first
    assert "... 4,994 more: 4,994 log_signal" in out.getvalue()
    assert "... 26 more gaps (use --json)" in out.getvalue()


def test_markdown_has_verdict_groups_and_merged_stacks(tmp_path: Path) -> None:
    md = render_markdown(sample(tmp_path))
    assert md.startswith("# triage hang report")
    assert "**Verdict:** `hang.mismatched_collective`" in md
    assert "| 1-3 |" in md and "## Merged stacks" in md


def test_json_round_trips_through_the_contract(tmp_path: Path) -> None:
    report = sample(tmp_path)
    again = Report.model_validate_json(render_json(report))
    assert again == report
    assert again.schema_version == "1.1"
