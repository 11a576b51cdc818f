"""README's example output is what `make demo` prints: this test runs the demo (a real
4-rank gloo job that hangs) at 80 columns and compares its report with README's block,
word for word (a pid's digits may move a line break). `make readme` (TRIAGE_UPDATE_README=1)
writes the demo's output into README instead."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest

from tests.conftest import REPO, triage_cli

README = REPO / "README.md"
BEGIN = "<!-- demo output (make readme writes it) -->\n```\n"
END = "```\n<!-- end of demo output -->"
WIDTH = 80


def normalized(report: str) -> str:
    """The report without what changes from run to run or machine to machine: the
    checkout's path, the host's name, process ids; the verdict box's border kept straight."""
    text = report.replace(str(REPO), ".").replace(f" on {socket.gethostname()} ", " on HOST ")
    text = re.sub(r"\bpid(:| )\d+", r"pid\g<1>PID", text)
    lines = []
    for line in text.rstrip().splitlines():
        if line.startswith("│") and line.endswith("│"):
            line = "│" + line[1:-1].rstrip().ljust(WIDTH - 2) + "│"
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def words(text: str) -> list[str]:
    return text.replace("│", " ").split()


@pytest.fixture(scope="module")
def demo_report() -> str:
    env = dict(os.environ, COLUMNS=str(WIDTH), TERM="dumb", NO_COLOR="1")
    done = subprocess.run(
        triage_cli("demo"), capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return normalized(done.stdout)


def test_readme_shows_the_demos_real_output(demo_report: str) -> None:
    text = README.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    if os.environ.get("TRIAGE_UPDATE_README"):
        text = text[:start] + demo_report + text[end:]
        README.write_text(text, encoding="utf-8")
        end = start + len(demo_report)
    stale = "README's example is stale: run `make readme`"
    assert words(text[start:end]) == words(demo_report), stale


def test_the_demo_report_fits_80_columns(demo_report: str) -> None:
    widths = [len(line) for line in demo_report.splitlines()]
    assert max(widths) <= WIDTH, max(widths)
