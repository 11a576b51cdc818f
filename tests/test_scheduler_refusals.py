"""A scheduler or container runtime that cannot give the job its GPUs, in its own words
(Slurm's, the Kubernetes scheduler's, the NVIDIA container runtime's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "sbatch: error: Batch job submission failed: Requested node configuration is not"
            " available",
            "config.launcher_args",
        ),
        (
            "Warning  FailedScheduling  2m  default-scheduler  0/4 nodes are available: 4"
            " Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption"
            " victims found for incoming pod.",
            "config.launcher_args",
        ),
        (
            "stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: initialization error:"
            " nvml error: driver not loaded: unknown",
            "config.backend_device",
        ),
    ],
    ids=["slurm-unsatisfiable", "kubernetes-insufficient-gpu", "container-driver"],
)
def test_a_scheduler_or_runtime_that_cannot_give_the_job_gpus(
    tmp_path: Path, line: str, cause: str
) -> None:
    top = analyze_files(tmp_path, {"job.log": line.replace("\\n", "\n") + "\n"}).hypotheses[0]
    assert top.cause_id == cause, (top.cause_id, top.title)
