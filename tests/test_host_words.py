"""What a GPU host's own logs and tools say under a failed job, as reports paste them
(tests/fixtures/host_words.json, each with the issue it was posted in): the driver that could
not bring a GPU up or lost it, its version against the user-space driver's, an NVLink error the
driver calls fatal, an InfiniBand port that is not up or an adapter whose firmware stopped, the
locked-memory limit and /dev/shm's size; ROCm's memory fault and AMD's GPU reset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "host_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("init", "hang.rank_exited", 0.45),
        ("gsp", "hang.rank_exited", 0.45),
        ("xid64", "hang.rank_exited", 0.45),
        ("nvlink", "hang.rank_exited", 0.45),
        ("aer", "hang.rank_exited", 0.45),
        ("nvrm", "comm.version_mismatch", 0.85),
        ("nvml", "comm.version_mismatch", 0.85),
        ("rdma", "comm.infiniband", 0.4),
        ("devinfo", "comm.infiniband", 0.4),
        ("ibdev2netdev", "comm.infiniband", 0.4),
        ("health", "comm.infiniband", 0.4),
        ("ulimit", "comm.infiniband", 0.35),
        ("rocm_fault", "hang.rank_exited", 0.2),
        ("amdgpu_reset", "hang.rank_exited", 0.45),
    ],
)
def test_the_hosts_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"host.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


def test_an_nvlink_error_the_driver_calls_nonfatal_is_no_lost_gpu(tmp_path: Path) -> None:
    causes = [
        h.cause_id
        for h in analyze_files(tmp_path, {"host.log": PASTES["nonfatal"]["text"]}).hypotheses
    ]
    assert "hang.rank_exited" not in causes


def test_an_unlimited_locked_memory_limit_is_no_reading(tmp_path: Path) -> None:
    text = PASTES["ulimit"]["text"].replace("(kbytes, -l) 64", "(kbytes, -l) unlimited")
    assert "comm.infiniband" not in [
        h.cause_id for h in analyze_files(tmp_path, {"host.log": text}).hypotheses
    ]


def test_a_small_dev_shm_beside_nccls_bare_system_error_makes_it_the_likely_call(
    tmp_path: Path,
) -> None:
    """df's line for a container's /dev/shm (Docker's 64 MB default) with NCCL's result code
    and nothing naming the call that failed."""
    text = (
        "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled"
        " system error, NCCL version 2.7.8\n$ df -h /dev/shm\nFilesystem      Size  Used Avail"
        " Use% Mounted on\nshm              64M     0   64M   0% /dev/shm\n"
    )
    top = analyze_files(tmp_path, {"rank0.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("comm.shm_exhausted", 0.6)
    assert "64 MB" in top.title and "system error" in top.title
    (tmp_path / "df").mkdir()
    alone = analyze_files(tmp_path / "df", {"df.log": text.split("$ ", 1)[1]}).hypotheses[0]
    assert (alone.cause_id, alone.confidence) == ("comm.shm_exhausted", 0.5)
    large = text.replace("64M     0   64M", "16G     0   16G")
    (tmp_path / "large").mkdir()
    causes = [h.cause_id for h in analyze_files(tmp_path / "large", {"r.log": large}).hypotheses]
    assert causes[0] != "comm.shm_exhausted"


def test_rocms_torch_without_a_gpu_reads_as_cudas(tmp_path: Path) -> None:
    """torch's ROCm build says HIP where the CUDA build says CUDA."""
    causes = []
    for vendor in ("CUDA", "HIP"):
        (tmp_path / vendor).mkdir()
        text = f"RuntimeError: No {vendor} GPUs are available\n"
        top = analyze_files(tmp_path / vendor, {"rank0.log": text}).hypotheses[0]
        causes.append((top.cause_id, top.confidence))
    assert causes[0] == causes[1] == ("config.device_assignment", 0.6)
