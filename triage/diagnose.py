"""From what a user names (a symptom, the job's processes and files) to a report.

The CLI commands and the MCP server's `triage_report` both come through here, so one
symptom and one set of targets give the same report however triage is reached.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from triage.engine import analyze, triage
from triage.models import Report
from triage.playbooks import Playbook, PlaybookError, load_playbooks, symptom_playbooks

# `analyze` lets the evidence name the symptom; the others fix it.
Symptom = Literal["analyze", "hang", "comm", "oom", "config", "wrong"]


def job_targets(
    paths: Sequence[str] = (),
    pids: Sequence[int] = (),
    launcher_pid: int | None = None,
    flight_recorder: Sequence[str] = (),
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """The context a playbook starts from. Flight Recorder dumps are paths like any other:
    `collect_files` sorts every file by its content, not by the option that named it."""
    targets: dict[str, Any] = {"paths": [*flight_recorder, *paths], "pids": list(pids)}
    if launcher_pid is not None:
        targets["launcher_pid"] = launcher_pid
    if timeout_s is not None:
        targets["timeout_s"] = timeout_s
    return targets


def select_playbook(
    symptom: str | None, plugin_dirs: list[Path] | None = None
) -> tuple[Playbook, dict[str, Playbook]]:
    """The playbook for `symptom` (None or "analyze": the intake playbook), and every
    symptom's playbook, from which the intake's verdict picks the next steps."""
    playbooks = load_playbooks(plugin_dirs)
    by_symptom = symptom_playbooks(playbooks)
    chosen = playbooks.get("analyze") if symptom in (None, "analyze") else by_symptom.get(symptom)
    if chosen is None:
        raise PlaybookError(f"no playbook for symptom {symptom or 'analyze'!r}")
    return chosen, by_symptom


def run_playbook(
    playbook: Playbook, by_symptom: dict[str, Playbook], targets: dict[str, Any]
) -> Report:
    """Run a chosen playbook; the intake playbook hands over to the symptom it finds."""
    if playbook.name == "analyze":
        return analyze(playbook, by_symptom, targets)
    return triage(playbook, targets)
