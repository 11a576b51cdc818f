"""Real triage.probe snapshots of wrong-results jobs: `triage analyze` names the cause, the
tensors and the culprit ranks.

Each folder under tests/fixtures/probe holds what one gloo job of triage/scenarios/wrong
left behind (its `probe/` snapshots, Flight Recorder dumps and check_replicas results,
its `logs/`) and `expected.json`, the ground truth; tests/fixtures/probe/record.py
re-records them. The whole folder must name the planted cause and culprits; the snapshots
alone must too, through the snapshot rules, naming the tensors and the script's line.
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

FIXTURES = REPO / "tests" / "fixtures" / "probe"
CASES = sorted(p.parent for p in FIXTURES.glob("*/expected.json"))
#: The wrong-results jobs; a hung job's snapshots (taken on the signal) are the hang tests'.
WRONG = [
    d
    for d in CASES
    if not json.loads((d / "expected.json").read_text())["cause"].startswith("hang.")
]

#: scenario -> tensors the snapshot finding must name
TENSORS = {
    "batchnorm_unsynced": ["1.running_mean", "1.running_var"],
    "init_mismatch": ["0.weight", "2.weight"],
    "nan_one_rank": ["0.weight"],
    "tp_wrong_placement": ["up.weight"],
    "unsynced_grads": ["0.weight", "2.weight"],
    "unused_head": ["aux_head.weight", "aux_head.bias"],
}


def expected(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "expected.json").read_text())
    return data


@functools.cache
def analyze(*paths: Path) -> dict[str, Any]:
    """`triage analyze PATH... --json`, in-process."""
    result = CliRunner().invoke(app, ["analyze", *map(str, paths), "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def job(directory: Path) -> dict[str, Any]:
    """What the job left: its snapshots and dumps, and its logs."""
    return analyze(directory / "probe", directory / "logs")


def verdict(report: dict[str, Any]) -> str:
    return "\n".join(
        f"{h['cause_id']} ranks={h['ranks']} conf={h['confidence']} {h['rule_id']}: {h['title']}"
        for h in report["hypotheses"]
    )


def test_every_wrong_results_scenario_is_covered() -> None:
    assert {d.name for d in WRONG} == set(TENSORS)


@pytest.mark.parametrize("directory", WRONG, ids=lambda p: p.name)
def test_the_job_folder_names_the_planted_cause_and_culprits(directory: Path) -> None:
    want, report = expected(directory), job(directory)
    assert report["hypotheses"], report["gaps"]
    top = report["hypotheses"][0]
    assert top["cause_id"] == want["cause"], verdict(report)
    assert sorted(top["ranks"]) == want["culprit_ranks"], verdict(report)
    assert report["symptom"] == "wrong-results"


@pytest.mark.parametrize("directory", WRONG, ids=lambda p: p.name)
def test_the_snapshots_alone_name_tensors_ranks_and_line(directory: Path) -> None:
    want, report = expected(directory), analyze(directory / "probe")
    top = report["hypotheses"][0]
    assert top["rule_id"].startswith("probe."), verdict(report)
    assert top["cause_id"] == want["cause"], verdict(report)
    assert sorted(top["ranks"]) == want["culprit_ranks"], verdict(report)
    text = top["title"] + " " + top["summary"]
    for name in TENSORS[directory.name]:
        assert name in text, (name, text)
    assert top["location"]["file"].endswith(want["script"]), top["location"]
    assert top["evidence"][0].startswith("replica:")
    assert any(e["kind"] == "replica_check" for e in report["evidence"])


def test_snapshots_under_no_sync_are_not_unsynced_gradients() -> None:
    """nan_one_rank accumulates two micro-batches under no_sync(): the local gradients
    between them differ by design, and DDP reduces them at the last one."""
    report = analyze(FIXTURES / "nan_one_rank" / "probe")
    assert "wrong.unsynced_grads" not in [h["cause_id"] for h in report["hypotheses"]]


def test_ddp_that_reduced_nothing_is_unused_parameters_not_unsynced_gradients() -> None:
    report = analyze(FIXTURES / "unused_head" / "probe")
    causes = [h["cause_id"] for h in report["hypotheses"]]
    assert causes[0] == "wrong.unused_parameters" and "wrong.unsynced_grads" not in causes
    assert "find_unused_parameters" in report["hypotheses"][0]["summary"]


@pytest.mark.parametrize("directory", WRONG, ids=lambda p: p.name)
def test_snapshots_of_a_running_job_raise_no_hang(directory: Path) -> None:
    """Snapshots taken by calls hold no Flight Recorder dump (ranks reach a call at different
    moments, so their dumps would disagree about finished collectives)."""
    report = job(directory)
    assert not [h for h in report["hypotheses"] if h["cause_id"].startswith("hang.")], verdict(
        report
    )


def test_the_hung_job_names_the_rank_in_the_rank_dependent_collective() -> None:
    """Two ranks, one in each op: the tie goes to the call under the rank-dependent `if`."""
    directory = FIXTURES / "hung_collective"
    want, report = expected(directory), job(directory)
    top = report["hypotheses"][0]
    assert top["cause_id"] == want["cause"], verdict(report)
    assert top["ranks"] == want["culprit_ranks"], verdict(report)
    assert top["location"]["line"] == want["fault_line"]
    assert any(e["kind"] == "probe_snapshot" for e in report["evidence"])


def test_signal_snapshots_alone_give_the_hang_its_stacks() -> None:
    """Where py-spy cannot attach, the snapshots taken on the signal hold each rank's main
    thread where it blocks: the stack rules name the rank and line from them alone."""
    directory = FIXTURES / "hung_collective"
    want, report = expected(directory), analyze(directory / "probe")
    top = report["hypotheses"][0]
    assert (top["cause_id"], top["ranks"]) == (want["cause"], want["culprit_ranks"]), verdict(
        report
    )
    assert top["location"]["line"] == want["fault_line"]
    assert {tuple(g["ranks"]) for g in report["rank_groups"]} == {(0,), (1,)}
