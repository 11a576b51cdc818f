"""Recorded logs of real failing torchrun jobs: `triage analyze` must name cause and culprits.

Each folder under tests/fixtures/logs holds what one job from triage/scenarios/failures
left behind (torchrun's console output and its per-rank log folders, CPU gloo, one planted
fault) and `expected.json`, the ground truth. Re-record with tests/fixtures/logs/record.py
when a scenario script changes (the first test catches drift). No torch needed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from triage.cli import app
from triage.scenarios.failures import FAILURES

FIXTURES = REPO / "tests" / "fixtures" / "logs"
CASES = sorted(p.parent for p in FIXTURES.glob("*/expected.json"))
LOCATED = [d for d in CASES if "location" in json.loads((d / "expected.json").read_text())]


def expected(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "expected.json").read_text())
    return data


@functools.cache
def analyze(directory: Path) -> dict[str, Any]:
    """`triage analyze <what the job wrote> --json`, in-process; expected.json is left out."""
    paths = [str(p) for p in sorted(directory.iterdir()) if p.name != "expected.json"]
    result = CliRunner().invoke(app, ["analyze", *paths, "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def verdict(report: dict[str, Any]) -> str:
    """The ranked hypotheses in one line each, for assertion messages."""
    return "\n".join(
        f"{h['cause_id']} ranks={h['ranks']} conf={h['confidence']}: {h['title']}"
        for h in report["hypotheses"]
    )


def test_fixtures_match_the_scenarios_that_recorded_them() -> None:
    assert {d.name for d in CASES} == set(FAILURES)
    for directory in CASES:
        want, failure = expected(directory), FAILURES[directory.name]
        assert want["cause"] == failure.cause_id, directory.name
        assert want["accept"] == list(failure.accept), directory.name
        assert want["culprit_ranks"] == list(failure.culprits), directory.name
        if "location" in want:  # the script changed since recording: re-record
            assert want["location"]["line"] == failure.fault_line(), directory.name
        console = (directory / "console.log").read_text()
        assert failure.shows in console, directory.name
        assert "ChildFailedError" in console or "DistNetworkError" in console, directory.name


@pytest.mark.parametrize("directory", CASES, ids=lambda p: p.name)
def test_analyze_names_the_planted_cause(directory: Path) -> None:
    want, report = expected(directory), analyze(directory)
    assert report["hypotheses"], f"no hypothesis; gaps: {report['gaps']}"
    top = report["hypotheses"][0]
    assert top["cause_id"] in {want["cause"], *want["accept"]}, verdict(report)


@pytest.mark.parametrize("directory", CASES, ids=lambda p: p.name)
def test_analyze_blames_the_culprit_ranks_not_their_victims(directory: Path) -> None:
    want, report = expected(directory), analyze(directory)
    assert report["hypotheses"], f"no hypothesis; gaps: {report['gaps']}"
    assert sorted(report["hypotheses"][0]["ranks"]) == want["culprit_ranks"], verdict(report)


@pytest.mark.parametrize("directory", LOCATED, ids=lambda p: p.name)
def test_analyze_points_at_the_faulting_line(directory: Path) -> None:
    want, report = expected(directory), analyze(directory)
    assert report["hypotheses"], f"no hypothesis; gaps: {report['gaps']}"
    top = report["hypotheses"][0]
    places = {
        (loc["file"], loc["line"]) for loc in [top["location"], *top["other_locations"]] if loc
    }
    fault = want["location"]
    assert any(f.endswith(fault["file"]) and line == fault["line"] for f, line in places), places
