"""Shared fixtures: the bundled tools and rules are registered once per session, and the
in-process `triage analyze` the rule tests run their logs through."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.polling import poll_until
from triage.engine import follow
from triage.models import Finding, Report
from triage.playbooks import load_playbooks, symptom_playbooks
from triage.plugins import load_all
from triage.readers.processes import environ_of
from triage.taxonomy import canonical_symptom

REPO = Path(__file__).resolve().parent.parent
load_all()


def triage_cli(*args: str) -> list[str]:
    """The `triage` command as this interpreter runs it."""
    return [sys.executable, "-m", "triage", *args]


def hang_report(pids: list[int]) -> dict[str, Any]:
    """`triage hang --json --pids ...` as a user runs it: exactly one JSON document."""
    done = subprocess.run(
        triage_cli("hang", "--json", "--pids", *map(str, pids)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


requires_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="needs the torch extra"
)


def analyze_cli(*paths: Path) -> dict[str, Any]:
    """`triage analyze PATH... --json` through the CLI in-process: the report a user gets."""
    from typer.testing import CliRunner

    from triage.cli import app

    result = CliRunner().invoke(app, ["analyze", *map(str, paths), "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def analyze_files(tmp_path: Path, files: dict[str, str], symptom: str | None = None) -> Report:
    """Write the logs and triage them in-process, as `triage analyze [--symptom]` does."""
    for name, text in files.items():
        (tmp_path / name).write_text(text if text.endswith("\n") else text + "\n")
    playbooks = load_playbooks()
    by_symptom = symptom_playbooks(playbooks)
    targets = {"paths": [str(tmp_path)], "pids": []}
    if symptom is None:
        return follow(playbooks["analyze"], targets, by_symptom=by_symptom)
    return follow(by_symptom[canonical_symptom(symptom)], targets)


def hypothesis(report: Report, cause: str) -> Finding:
    """The report's hypothesis for `cause`; the test fails, listing the others, without one."""
    found = [h for h in report.hypotheses if h.cause_id == cause]
    assert found, f"no {cause} in {[(h.cause_id, h.confidence) for h in report.hypotheses]}"
    return found[0]


def _published(pid: int) -> dict[str, str] | None:
    return environ_of(pid) or None


def wait_for_environ(pids: Iterable[int]) -> None:
    """Popen returns once exec has begun, a moment before the kernel publishes the new
    program's environment (/proc/PID/environ reads empty until then): wait for it."""
    for pid in pids:
        poll_until(partial(_published, pid), 10, f"environment of pid {pid}")
