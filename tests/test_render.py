"""Renderers: the verdict first, readable at 80 columns, markdown for tickets, JSON round trip."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tests.test_hang_rules import report_of, source, state
from triage.models import Report
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


def test_markdown_has_verdict_groups_and_merged_stacks(tmp_path: Path) -> None:
    md = render_markdown(sample(tmp_path))
    assert md.startswith("# triage hang report")
    assert "**Verdict:** `hang.mismatched_collective`" in md
    assert "| 1-3 |" in md and "## Merged stacks" in md


def test_json_round_trips_through_the_contract(tmp_path: Path) -> None:
    report = sample(tmp_path)
    again = Report.model_validate_json(render_json(report))
    assert again == report
    assert again.schema_version == "1.0"
