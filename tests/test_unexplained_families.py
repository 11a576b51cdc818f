"""A failure no rule reads still names its family from its own words.

The last resort used to read every unexplained exception as a setup error, and a failure
pasted without an exception or a level (`Failed to create QP`) as nothing at all. Its
words say more: a socket, a connection or a communication library is a transport's
failure, a wait that ran out a hang's, memory or an allocation an OOM's. Each message
below is a real one (its source in the comment), read by no specific rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("text", "cause", "rule"),
    [
        # ROCm gpu-cluster-networking troubleshooting: RDMA queue pair creation failed
        ("Failed to create QP\nCouldn't create QP", "comm.unknown", "logs.unexplained_transport"),
        # HabanaAI/HCL hcl_tcp_utils.cpp: the coordinator is not reachable
        (
            "Connect to server ended with timeout. ip 10.3.0.11:9999",
            "comm.unknown",
            "logs.unexplained_transport",
        ),
        # horovod mpi_operations.cc
        (
            "horovod.common.exceptions.HorovodInternalError: MPI_Allreduce failed, see MPI"
            " output for details.",
            "comm.unknown",
            "logs.unexplained_transport",
        ),
        # torch.utils.data's DataLoader(timeout=...)
        (
            "RuntimeError: DataLoader timed out after 120 seconds",
            "hang.unknown",
            "logs.unexplained_wait",
        ),
        # vllm-project/vllm#15102: vLLM's compiled Ray graph waited for a worker's output
        (
            "ray.exceptions.RayChannelTimeoutError: System error: Timed out waiting for object"
            " available to read.",
            "hang.unknown",
            "logs.unexplained_wait",
        ),
        # huggingface/transformers#22328 (PyTorch/XLA on a TPU v3-8)
        (
            "OP_REQUIRES failed at tpu_execute_op.cc:266 : RESOURCE_EXHAUSTED: Attempting to"
            " reserve 10.51G at the bottom of memory. That was not possible.",
            "oom.unknown",
            "logs.unexplained_memory",
        ),
        # Lightning-AI/pytorch-lightning#19626: FSDP's state check, pasted without its type
        (
            "Expects `BACKWARD_PRE` or `BACKWARD_POST` state but got HandleTrainingState.FORWARD",
            "config.unknown",
            "logs.unexplained_exception",
        ),
        # a development case (torchrec): a sharded tensor's metadata against the group
        (
            "Number of local shards (1) does not match number of local shards metadata in"
            " sharded_tensor_metadata (0) on rank (8)",
            "config.unknown",
            "logs.unexplained_exception",
        ),
        # deepspeed comm.py: a missing module or variable is the setup's, whatever it names
        (
            "ModuleNotFoundError: No module named 'mpi4py'",
            "config.unknown",
            "logs.unexplained_exception",
        ),
        ("KeyError: 'NCCL_SOCKET_IFNAME'", "config.unknown", "logs.unexplained_exception"),
    ],
)
def test_the_words_of_an_unread_failure_name_its_family(
    tmp_path: Path, text: str, cause: str, rule: str
) -> None:
    top = analyze_files(tmp_path, {"rank2.log": f"step 3 loss 2.31\n{text}\n"}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == (cause, rule)
    assert top.confidence <= 0.12 and top.fix


def test_a_wait_that_ran_out_is_no_rank_that_exited(tmp_path: Path) -> None:
    """A timeout raised on a rank is a symptom of what it waited for: the exception is not
    read as the rank whose exit the others waited on."""
    report = analyze_files(
        tmp_path,
        {
            "rank1.log": "[rank1]: torch.distributed.DistBackendError: Work timed out after 600012 milliseconds."
        },
    )
    assert [h.cause_id for h in report.hypotheses] == ["hang.unknown"]
    assert report.hypotheses[0].ranks == [1]
    assert "wait timed out" in report.hypotheses[0].title


@pytest.mark.parametrize(
    "line",
    [
        "NCCL INFO NET/IB : failed to get device, falling back to sockets",
        "[W ProcessGroupGloo.cpp:684] Warning: Unable to resolve hostname to a (local) address.",
        "[rank0]:[W1125 12:00:00.1 socket.cpp:1] client socket failed to connect, retrying",
        "UserWarning: the pin memory thread failed to start",
        "tests failed: 0",
        "0 failed, 12 passed",
        "no failures so far",
        # a benchmark's metric (a development case: SGLang's accuracy script)
        "Invalid: 1.000",
    ],
)
def test_information_warnings_counts_and_metrics_are_no_failure(tmp_path: Path, line: str) -> None:
    found = analyze_files(tmp_path, {"rank0.log": f"{line}\n"}).hypotheses
    assert [h.rule_id for h in found if h.rule_id.startswith("logs.unexplained")] == []


def test_a_failure_in_plain_words_beside_a_crash_adds_nothing(tmp_path: Path) -> None:
    """`Aborted` is a plain failure word; the crash's own reading says more."""
    report = analyze_files(tmp_path, {"rank0.log": "Aborted (core dumped)\n"})
    assert [h.rule_id for h in report.hypotheses] == ["logs.rank_crashed"]


#: A development case of the corpus (DETR on 8 GPUs): one rank's data file is missing, the
#: seven others spin at 100% waiting for it. Read alone, the exception is a setup guess first.
MISSING_FILE = (
    "FileNotFoundError: [Errno 2] No such file or directory: '/data/coco/train2017/000000.jpg'"
)


def test_the_reported_hang_settles_which_last_resort_stands_first(tmp_path: Path) -> None:
    """An exception on one rank is the rank whose exit its peers waited for only if the job
    hung: the user saying so puts that reading first."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    alone = analyze_files(tmp_path / "a", {"rank3.log": MISSING_FILE}).hypotheses
    assert [h.cause_id for h in alone] == ["config.unknown", "hang.rank_exited"]
    hung = analyze_files(tmp_path / "b", {"rank3.log": MISSING_FILE}, symptom="hang").hypotheses
    assert [(h.cause_id, h.confidence) for h in hung] == [
        ("hang.rank_exited", 0.25),
        ("config.unknown", 0.12),
    ]


def test_the_reported_symptoms_unknown_stands_beside_another_familys_last_resort(
    tmp_path: Path,
) -> None:
    found = analyze_files(tmp_path, {"rank3.log": MISSING_FILE}, symptom="oom").hypotheses
    assert [h.cause_id for h in found] == ["config.unknown", "hang.rank_exited", "oom.unknown"]


def test_a_named_symptom_leaves_a_reading_of_a_failure_as_it_is(tmp_path: Path) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    found = analyze_files(tmp_path, {"rank0.log": oom}, symptom="hang").hypotheses
    assert found[0].cause_id.startswith("oom.") and found[0].confidence != 0.25
