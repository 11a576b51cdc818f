"""Slurm's and MPI's own refusals of a launch line read as the launch line's fault
(config.launcher_args): srun asking for more than the job holds (recorded on the one-host
cluster), an srun waiting for resources another step of the job holds (the job then hangs;
Slurm 22.05 here waits without a word, so its wording is taken from public reports), and
mpirun asking for more slots than its hosts have."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import analyze_files

if TYPE_CHECKING:
    from tests.slurm_cluster import SlurmCluster

pytest_plugins = ["tests.slurm_cluster"]

_WAITING = (
    "srun: Job 9479148 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
    "srun: Job 9479148 step creation still disabled, retrying (Requested nodes are busy)\n"
)


@pytest.mark.slurm
def test_srun_asking_for_more_than_the_allocation(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    job = slurm_cluster.sbatch("#!/bin/sh\nsrun -n 64 hostname\n", nodes=1, ntasks_per_node=1)

    def refused() -> str | None:
        path = slurm_cluster.job_output(job)
        text = path.read_text() if path.exists() else ""
        return text if "Unable to create step" in text else None

    try:
        text = slurm_cluster.wait_for(refused, 60, f"srun's refusal in job {job}'s output")
    finally:
        slurm_cluster.cancel(job)
    top = analyze_files(tmp_path, {"slurm.out": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.launcher_args", 0.7), text
    assert "more than the job's allocation" in top.title and "--ntasks" in top.fix


_MPIRUN_SLOTS = (
    "-----------------------------------------------------------------------\n"
    "There are not enough slots available in the system to satisfy the 8\n"
    "slots that were requested by the application:\n\n  python\n\n"
    "Either request fewer slots for your application, or make more slots\n"
    "available for use.\n"
)


@pytest.mark.parametrize(
    ("text", "confidence", "fix_words"),
    [(_WAITING, 0.6, "--overlap"), (_MPIRUN_SLOTS, 0.75, "slots")],
    ids=["srun-waits-for-its-step", "mpirun-slots"],
)
def test_a_launch_line_its_launcher_cannot_serve(
    tmp_path: Path, text: str, confidence: float, fix_words: str
) -> None:
    top = analyze_files(tmp_path, {"launch.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.launcher_args", confidence)
    assert fix_words in top.fix


def test_an_srun_that_got_its_step_after_waiting_is_no_fault(tmp_path: Path) -> None:
    text = _WAITING + "srun: Step created for StepId=9479148.1\n"
    hypotheses = analyze_files(tmp_path, {"slurm.out": text}).hypotheses
    assert all(h.cause_id != "config.launcher_args" for h in hypotheses)
