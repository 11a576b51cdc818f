"""Slurm's and MPI's own refusals of a launch line read as the launch line's fault
(config.launcher_args): srun asking for more than the job holds (recorded on the one-host
cluster), an srun waiting for resources another step of the job holds (the job then hangs;
Slurm 22.05 here waits without a word, so its wording is taken from public reports),
mpirun asking for more slots than its hosts have, and sbatch or srun refusing a request
this cluster's configuration does not take (a GPU request without GRES, recorded here)."""

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


@pytest.mark.slurm
def test_sbatch_refusing_a_gpu_request_this_cluster_has_no_gres_for(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The one-host cluster configures no GPUs: sbatch refuses `--gres=gpu:1` before anything
    runs, as clusters do whose GRES configuration the request does not fit."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nhostname\n")
    with pytest.raises(RuntimeError) as refused:
        slurm_cluster.run("sbatch", "--gres=gpu:1", f"--chdir={tmp_path}", str(script))
    text = str(refused.value).split(": ", 1)[1]
    assert "sbatch: error:" in text
    top = analyze_files(tmp_path, {"submit.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.launcher_args", 0.6), text
    assert "Slurm refused" in top.title and "--gres" in top.fix


@pytest.mark.parametrize(
    "text",
    [
        # facebookincubator/submitit#171
        "submitit.core.utils.FailedJobError: sbatch: error: Parameter --gres=gpu:1 no longer"
        " acceptable, please switch to --gpus=1",
        # radical-cybertools/radical.saga#835 (TACC Longhorn)
        "sbatch: error: Batch job submission failed: Requested GRES option unsupported by"
        " configured SelectType plugin",
        # geoschem/geos-chem#822
        "srun: error: Couldn't find the specified plugin name for mpi/pmix looking at all files\n"
        "srun: error: cannot find mpi plugin for mpi/pmix",
    ],
    ids=["gres-form", "gres-unsupported", "mpi-plugin"],
)
def test_slurm_refusals_of_the_request_in_reports(tmp_path: Path, text: str) -> None:
    top = analyze_files(tmp_path, {"submit.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.launcher_args", 0.6)


def test_slurm_s_own_progress_is_no_refusal(tmp_path: Path) -> None:
    text = "sbatch: Submitted batch job 4123\nsrun: error: task 1: Exited with exit code 1\n"
    found = analyze_files(tmp_path, {"submit.log": text}).hypotheses
    assert all("Slurm refused" not in h.title for h in found)
