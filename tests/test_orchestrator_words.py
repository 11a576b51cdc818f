"""What the orchestrators above a job say when it fails (Ray's raylet, autoscaler and memory
monitor, Kubernetes' nodes and pods, Kubeflow's, JobSet's and Kueue's controllers, SkyPilot),
as reports paste it (tests/fixtures/orchestrator_words.json, each with its issue): a node
lost, workers that failed, memory, a request no node can hold, a deadline, a preemption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "orchestrator_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("ray_node_dead", "hang.rank_exited", 0.45),
        ("raylet_terminated", "hang.rank_exited", 0.45),
        ("node_not_ready", "hang.rank_exited", 0.45),
        ("ray_raylet_oom", "oom.host", 0.85),
        ("system_oom", "oom.host", 0.85),
        ("exit_137", "oom.host", 0.6),
        ("ray_infeasible", "config.launcher_args", 0.65),
        ("ray_placement", "config.launcher_args", 0.65),
        ("ray_autoscaler", "config.launcher_args", 0.65),
        ("jobset", "hang.rank_exited", 0.2),
        ("pytorchjob", "hang.rank_exited", 0.2),
        ("pod_deadline", "hang.unknown", 0.1),
        ("device_plugin", "config.backend_device", 0.7),
    ],
)
def test_the_orchestrators_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"events.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


@pytest.mark.parametrize("name", ["kueue_preempted", "skypilot_preempted"])
def test_a_preemption_is_no_failure_of_the_jobs_own(tmp_path: Path, name: str) -> None:
    top = analyze_files(tmp_path, {"events.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.unknown", 0.1)
    assert top.title == "the scheduler preempted the job: no failure of its own"
    assert "checkpoint" in top.fix


def test_slurms_preemption_reads_as_the_others(tmp_path: Path) -> None:
    line = "slurmstepd: error: *** JOB 4123 ON node-03 CANCELLED AT 2024-05-01T10:00:00 DUE TO PREEMPTION ***"
    top = analyze_files(tmp_path, {"slurm.log": line + "\n"}).hypotheses[0]
    assert top.title == "the scheduler preempted the job: no failure of its own"
