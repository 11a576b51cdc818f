"""Texts that show a failure only in generic words still get an honest, weak hypothesis.

A log that stops on a progress bar short of its total (the loop stopped moving, nothing
printed since), cuBLAS/cuDNN failing to create its handle, the TCPStore client's bare
`Socket Timeout`, a watchdog or a custom all-reduce dying on a CUDA error, any other failed
CUDA call, a node the scheduler lost: each names its failure's family at low confidence with the step that would tell
its candidates apart, and gives way to any rule that names a cause.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import analyze_files

BAR = "Epoch 0:  37%|███▋      | 370/1000 [05:12<08:51,  1.19it/s, loss=2.31, v_num=3]"


def test_a_log_stopped_on_a_progress_bar_reads_as_a_weak_hang(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"rank0.log": f"loading data\n{BAR}\n"})
    top = report.hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("hang.unknown", "logs.hang_markers")
    assert top.confidence < 0.3
    assert "370/1000" in top.summary


def test_tqdm_updates_written_with_carriage_returns_read_from_the_last(tmp_path: Path) -> None:
    updates = "\r".join(f"  {p}%|█         | {p * 10}/1000 [00:01<00:09]" for p in (1, 2, 3))
    report = analyze_files(tmp_path, {"rank0.log": updates + "\n"})
    assert report.hypotheses[0].cause_id == "hang.unknown"
    assert "30/1000" in report.hypotheses[0].summary


@pytest.mark.parametrize(
    "text",
    [
        "Epoch 0: 100%|██████████| 1000/1000 [05:12<00:00,  3.19it/s]\n",
        f"{BAR}\nSaving checkpoint to out/ckpt-370\n",
    ],
    ids=["bar-complete", "bar-not-last"],
)
def test_a_finished_bar_or_one_followed_by_output_is_no_finding(tmp_path: Path, text: str) -> None:
    found = analyze_files(tmp_path, {"rank0.log": text}).hypotheses
    # a bar's loss is read as metrics without a failure; no stop, no hang
    assert [h.rule_id for h in found if h.rule_id != "logs.metrics_only"] == []


def test_the_cli_reports_a_verdict_read_from_where_a_log_stops(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text(BAR + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "triage", "analyze", str(tmp_path / "rank0.log")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "hang.unknown" in done.stdout and "no evidence" not in done.stderr


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
    ],
)
def test_a_cuda_library_that_cannot_start_is_a_weak_memory_guess(tmp_path: Path, line: str) -> None:
    top = analyze_files(tmp_path, {"rank2.log": f"[rank2]:{line}\n"}).hypotheses[0]
    assert (top.cause_id, top.rule_id, top.ranks) == ("oom.unknown", "logs.oom_markers", [2])
    assert top.confidence < 0.3
    assert "nvidia-smi" in top.fix and "torch.version.cuda" in top.fix


def test_cublas_alloc_failed_is_memory_running_out(tmp_path: Path) -> None:
    line = (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    )
    assert analyze_files(tmp_path, {"rank0.log": line}).hypotheses[0].cause_id.startswith("oom.")


@pytest.mark.parametrize(
    "line", ["RuntimeError: Socket Timeout", "RuntimeError: Stop_waiting response is expected"]
)
def test_the_store_clients_bare_timeout_is_a_weak_rendezvous_guess(
    tmp_path: Path, line: str
) -> None:
    top = analyze_files(tmp_path, {"rank1.log": line + "\n"}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("comm.rendezvous", "logs.rendezvous")
    assert top.confidence <= 0.3


def test_a_socket_out_of_descriptors_names_the_limit(tmp_path: Path) -> None:
    line = "misc/socket.cc:620 NCCL WARN ncclOsSocketTryAccept: Accept failed: Too many open files"
    top = analyze_files(tmp_path, {"rank5.log": f"node3:812:901 [5] {line}\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("comm.unknown", 0.5)
    assert "ulimit -n" in top.fix


def test_the_data_loaders_own_descriptor_error_is_not_a_socket(tmp_path: Path) -> None:
    line = (
        "RuntimeError: Too many open files. Communication with the workers is no longer possible."
    )
    report = analyze_files(tmp_path, {"rank0.log": line})
    assert all(h.cause_id != "comm.unknown" for h in report.hypotheses)


def test_a_rank_that_passed_the_monitored_barrier_names_no_culprit(tmp_path: Path) -> None:
    """The line is rank 3's report about rank 0, the barrier's coordinator: it is no failure
    of its own, and the ranks that never arrived are in rank 0's log."""
    line = (
        "RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors while"
        " waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank."
    )
    report = analyze_files(tmp_path, {"train.log": line})
    assert all("failed on its own" not in h.summary for h in report.hypotheses)
    timeout = next(h for h in report.hypotheses if h.cause_id == "hang.collective_timeout")
    assert "rank 0's log names the ranks that never arrived" in timeout.summary


@pytest.mark.parametrize(
    "line",
    [
        "FAILED tests/test_trainer.py::Test::test_evaluate - AssertionError: 0.5175 != 0.41851",
        "AssertionError: 2.3125 != 2.3129 within 7 places",
        "E       assert 0.25 == 0.5",
    ],
)
def test_an_assertion_that_two_numbers_are_equal_is_results_that_differ(
    tmp_path: Path, line: str
) -> None:
    top = analyze_files(tmp_path, {"test.log": f"{line}\n"}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("wrong.unknown", "logs.wrong_markers")


@pytest.mark.parametrize(
    "line",
    ["AssertionError: world size 4 != 8 GPUs", "E       assert rank == 0", "assert 1 == 1"],
)
def test_other_assertions_are_no_results_that_differ(tmp_path: Path, line: str) -> None:
    report = analyze_files(tmp_path, {"test.log": f"{line}\n"})
    assert all(h.cause_id != "wrong.unknown" for h in report.hypotheses)


@pytest.mark.parametrize(
    "line",
    [
        "[rank0]:[E1030 15:32:32.970893361 ProcessGroupNCCL.cpp:2055] [PG ID 5 PG GUID 51 Rank 0]"
        " Process group watchdog thread terminated with exception: HIP error: operation not"
        " permitted when stream is capturing",
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'",
    ],
    ids=["watchdog-died", "custom-all-reduce"],
)
def test_a_communication_layer_that_failed_on_a_cuda_error_is_a_comm_failure(
    tmp_path: Path, line: str
) -> None:
    """ProcessGroupNCCL's watchdog dying on its stream's error, and a custom all-reduce
    kernel's own CUDA check, fail the communication layer: its family, weakly."""
    top = analyze_files(tmp_path, {"rank0.log": line}).hypotheses[0]
    assert top.cause_id == "comm.unknown" and top.confidence < 0.3


def test_any_other_failed_cuda_call_is_a_rank_lost_without_its_reason(tmp_path: Path) -> None:
    text = "Failed: Cuda error /workspace/csrc/attention.cu:455 'invalid argument'"
    top = analyze_files(tmp_path, {"rank0.log": text}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("hang.rank_exited", "logs.rank_crashed")
    assert "CUDA_LAUNCH_BLOCKING=1" in top.fix and top.confidence <= 0.2


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: *** STEP 4123.0 ON gpu-node-07 CANCELLED AT 2026-11-27T03:12:44 DUE"
        " TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        "srun: error: Node failure on gpu-node-07",
        "ray.exceptions.RayActorError: The actor died because its node has died. Node Id: 5c1f0a2b",
    ],
    ids=["slurm-step-cancelled", "srun-node-failure", "ray-node-died"],
)
def test_a_node_the_scheduler_lost_is_every_rank_on_it(tmp_path: Path, line: str) -> None:
    top = analyze_files(tmp_path, {"job.log": line}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_exited", 0.45)
    assert "lost" in top.title and "Drain the node" in top.fix
