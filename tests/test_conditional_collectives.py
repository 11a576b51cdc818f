"""A collective under a rank- or data-dependent `if` inside the loop is told from uneven
inputs, on real hung gloo jobs: the verdict names the ranks that took the other path and
the call under the `if`, and the fix names the `if` that exists.

Both jobs were first reported wrong (uneven inputs, with a DistributedSampler fix) by
people trying `triage hang` on bugs they planted (issue 13).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, requires_torch, triage_cli
from triage.scenarios import RankJob

JOBS = REPO / "tests" / "jobs"
pytestmark = [pytest.mark.scenario, requires_torch]


def _hang(job: RankJob) -> dict[str, Any]:
    job.wait_until_stalled(timeout_s=120)
    done = subprocess.run(
        triage_cli("hang", "--json", *map(str, job.pids)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_collective_skipped_by_one_rank_is_not_uneven_inputs() -> None:
    with RankJob(JOBS / "skipped_collective.py", world_size=3) as job:
        report = _hang(job)
        branch, call = job.marker_line("branch"), job.marker_line("wait")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "hang.mismatched_collective", top
    assert top["ranks"] == [2]
    assert Path(top["location"]["file"]).name == "skipped_collective.py"
    assert top["location"]["line"] == call  # the skipped call, not the innocent barrier
    assert f"(line {branch})" in top["summary"] and "rank == 2" in top["fix"]
    assert "hang.uneven_inputs" not in {h["cause_id"] for h in report["hypotheses"]}


def test_a_checkpoint_collective_under_a_data_dependent_if_is_not_uneven_inputs() -> None:
    with RankJob(JOBS / "conditional_checkpoint.py", world_size=4) as job:
        report = _hang(job)
        branch, call = job.marker_line("branch"), job.marker_line("call")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "hang.mismatched_collective", top
    assert top["ranks"] == [0, 3]
    assert top["location"]["line"] == call
    assert "loss.item() < best" in top["fix"] and "all_reduce it first" in top["fix"]
    assert f"(line {branch})" in top["summary"]
    assert "DistributedSampler" not in json.dumps(report["hypotheses"])


def test_flight_recorder_dumps_of_the_skipped_collective_name_the_if(tmp_path: Path) -> None:
    """The same job's recorders, taken by triage.probe on `--signal-probe`: read alone, they
    must not blame the barrier's line for a branch it is not in."""
    env = {"TRIAGE_FR_DIR": str(tmp_path / "fr"), "TRIAGE_DUMP_DIR": str(tmp_path / "probe")}
    with RankJob(JOBS / "skipped_collective.py", world_size=3, env=env) as job:
        job.wait_until_stalled(timeout_s=120)
        done = subprocess.run(
            triage_cli("hang", "--json", "--signal-probe", *map(str, job.pids)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        branch = job.marker_line("branch")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["hypotheses"][0]["cause_id"] == "hang.mismatched_collective"
    assert len(list((tmp_path / "fr").iterdir())) == 3
    alone = subprocess.run(
        triage_cli("analyze", "--json", str(tmp_path / "fr")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    top = json.loads(alone.stdout)["hypotheses"][0]
    assert top["cause_id"] == "hang.mismatched_collective", top
    assert top["ranks"] == [2]
    assert f"skipped_collective.py:{branch}" in top["fix"] and "rank == 2" in top["fix"]
