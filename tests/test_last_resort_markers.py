"""Text that shows a failure always gets a hypothesis: a crash, a CUDA fault, a task that
exited with an error, or a job cancelled at its time limit each give a weak, honest one
when nothing names a cause, and give way to any rule that does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files

CRASHES = {
    "segfault": "Segmentation fault (core dumped)",
    "abort": "terminate called after throwing an instance of 'c10::Error'",
    "python": "Fatal Python error: Segmentation fault",
    "loader": "ERROR: Unexpected segmentation fault encountered in worker.",
    "cuda": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "assert": "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block:"
    " [0,0,0], thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] &&"
    ' "index out of bounds"` failed.',
    "srun": "srun: error: gpu-node-07: task 3: Exited with exit code 1",
    "mpirun": "mpirun noticed that process rank 5 with PID 0 on node gpu-node-02 exited on"
    " signal 11 (Segmentation fault).",
    "torchrun": "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11)"
    " local_rank: 0 (pid: 2412) of binary: /usr/bin/python3",
    "heap": "free(): corrupted unsorted chunks",
    "double-free": "double free or corruption (!prev)",
    "openmpi": "[rack1-93-slot7:186363] Signal: Aborted (6)",
    "ray": "(raylet) A worker died or was killed while executing a task by an unexpected system"
    " error. Worker PID: 5678 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker"
    " unexpectedly exits with a connection error code 2. End of file.",
    "kubelet": "Warning  BackOff  1m (x10 over 5m)  kubelet  Back-off restarting failed"
    " container pytorch in pod trainer-worker-1_default",
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_a_crash_alone_is_a_weak_rank_exited(tmp_path: Path, name: str) -> None:
    report = analyze_files(tmp_path, {"job.log": CRASHES[name] + "\n"})
    top = report.hypotheses[0]
    # a kernel's own assertion names what the rank died on (tests/test_hang_log_rules.py)
    assert (top.cause_id, top.confidence) == ("hang.rank_exited", 0.45 if name == "assert" else 0.2)
    if name in ("cuda", "assert"):
        assert "CUDA_LAUNCH_BLOCKING=1" in top.fix


def test_the_rank_a_crash_names_is_the_culprit(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"job.log": CRASHES["mpirun"] + "\n"})
    assert report.hypotheses[0].ranks == [5]


def test_the_launcher_stopping_healthy_workers_is_no_crash(tmp_path: Path) -> None:
    text = (
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2413 closing"
        " signal SIGTERM\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -15)"
        " local_rank: 1 (pid: 2413) of binary: /usr/bin/python3\n"
    )
    report = analyze_files(tmp_path, {"job.log": text})
    assert "hang.rank_exited" not in [h.cause_id for h in report.hypotheses]


def test_a_named_cause_outranks_the_crash(tmp_path: Path) -> None:
    """An OOM before the segfault explains it: the last resort gives way."""
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a"
        " total capacity of 79.15 GiB of which 1.2 GiB is free.\n"
        "Segmentation fault (core dumped)\n"
    )
    report = analyze_files(tmp_path, {"job.log": text})
    causes = [h.cause_id for h in report.hypotheses]
    assert causes[0].startswith("oom.") and "hang.rank_exited" not in causes


def test_a_job_cancelled_at_its_time_limit_may_have_hung(tmp_path: Path) -> None:
    text = (
        "step 1200 loss 2.113\n"
        "slurmstepd: error: *** JOB 88231 ON gpu-node-03 CANCELLED AT 2024-05-02T03:12:44"
        " DUE TO TIME LIMIT ***\n"
    )
    report = analyze_files(tmp_path, {"slurm-88231.out": text})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.unknown", 0.1)
    assert "--time" in top.fix


@pytest.mark.parametrize(
    "stop",
    [
        "slurmstepd: error: *** STEP 88231.0 ON gpu-node-03 CANCELLED AT 2024-05-02T03:12:44"
        " DUE TO TIME LIMIT ***",
        "slurmstepd: error: *** JOB 88231 ON gpu-node-03 CANCELLED AT 2024-05-02T03:12:44 ***",
    ],
    ids=["time-limit", "scancel"],
)
def test_tasks_the_scheduler_killed_when_it_stopped_the_job_are_no_crash(
    tmp_path: Path, stop: str
) -> None:
    """srun reports the tasks it killed on the way out; they neither crashed nor ran out of
    memory."""
    text = f"step 1200 loss 2.113\n{stop}\nsrun: error: gpu-node-03: tasks 0-7: Killed\n"
    report = analyze_files(tmp_path, {"slurm-88231.out": text})
    top = report.hypotheses[0]
    assert top.cause_id == "hang.unknown", report.hypotheses
    assert "scancel" in top.title if "JOB" in stop else "time limit" in top.title


@pytest.mark.parametrize(
    "killed",
    [
        "srun: error: gpu-node-03: tasks 0-7: Killed",
        "mpirun noticed that process rank 3 with PID 0 on node n3 exited on signal 9 (Killed).",
    ],
)
def test_tasks_killed_outside_a_scheduler_stop_are_a_host_oom_guess(
    tmp_path: Path, killed: str
) -> None:
    report = analyze_files(tmp_path, {"slurm-88231.out": killed + "\n"})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("oom.host", 0.6), report.hypotheses


def test_two_gpus_in_one_op_is_a_device_mapping_error(tmp_path: Path) -> None:
    text = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two"
        " devices, cuda:0 and cuda:3! (when checking argument for argument mat1 in method"
        " wrapper_CUDA_addmm)\n"
    )
    report = analyze_files(tmp_path, {"rank3.log": text})
    top = report.hypotheses[0]
    assert top.cause_id == "config.device_assignment" and top.confidence < 0.5
    assert "cuda:0 and cuda:3" in top.title


def test_cpu_and_gpu_in_one_op_is_not_a_device_mapping_error(tmp_path: Path) -> None:
    text = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two"
        " devices, cpu and cuda:0!\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert report.hypotheses[0].cause_id != "config.device_assignment"


def test_a_launcher_stopped_by_ctrl_c_may_have_hung(tmp_path: Path) -> None:
    """Older torch names the signal by number."""
    text = (
        "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting"
        " down workers\n"
    )
    report = analyze_files(tmp_path, {"launcher.log": text})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.unknown", 0.1)
    assert "SIGINT" in top.title


@pytest.mark.parametrize(
    "announced",
    [
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8",
        "[2023-05-01 10:00:00,000] [INFO] [comm.py:637:init_distributed] Initializing"
        " TorchBackend in DeepSpeed with backend nccl",
        "INFO:torch.distributed.distributed_c10d:Added key: store_based_barrier_key:1 to store"
        " for rank: 0",
    ],
)
def test_a_log_that_stops_in_process_group_setup_waits_for_ranks_that_never_joined(
    tmp_path: Path, announced: str
) -> None:
    """Weak both: the other ranks never reached the store (0.2), or the job hung there."""
    report = analyze_files(tmp_path, {"rank0.log": f"{announced}\n{'-' * 80}\n"})
    top, hang = report.hypotheses[:2]
    assert (top.cause_id, top.confidence) == ("comm.rendezvous", 0.2)
    assert "never joined" in top.title and "MASTER_ADDR" in top.fix
    assert (hang.cause_id, hang.confidence) == ("hang.unknown", 0.15)
    assert "setup began" in hang.summary and "MASTER_ADDR" in hang.fix


def test_a_process_group_every_rank_joined_is_no_stall(tmp_path: Path) -> None:
    text = (
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2\n"
        "All distributed processes registered. Starting with 2 processes\n"
        "epoch 0 loss 2.31\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": text})
    # the loss line alone is read as metrics without a failure; nothing stalled
    assert [h.rule_id for h in report.hypotheses] == ["logs.metrics_only"]


def test_a_launcher_hung_up_on_is_no_out_of_memory(tmp_path: Path) -> None:
    """The launcher itself got SIGHUP (its terminal closed) and forwarded it: the workers'
    teardown is its doing, not a worker that died without a word (the OOM killer's mark)."""
    text = (
        "     39/100      13.9G      2.252      3.897  43%|####3     | 496/1155 [05:07<06:48]"
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting"
        " down workers\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4193 closing"
        " signal SIGHUP\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4194 closing"
        " signal SIGHUP\n"
    )
    report = analyze_files(tmp_path, {"launcher.log": text})
    assert "oom.host" not in [h.cause_id for h in report.hypotheses]
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.unknown", 0.1)
    assert "terminal closed" in top.title and "nohup" in top.fix


def test_an_exit_code_after_a_visible_exception_is_no_crash_without_a_cause(
    tmp_path: Path,
) -> None:
    """torchrun's `failed (exitcode: 1)` echoes Python's exit after the exception above it:
    the text does say why, so the exception is what the report reads; a signal stays a crash."""
    exception = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 12, in <module>\n'
        "    main()\n"
        "KeyError: 'labels'\n"
    )
    exit_line = (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: {code})"
        " local_rank: 0 (pid: 2412) of binary: /usr/bin/python3\n"
    )
    echoed = analyze_files(tmp_path, {"job.log": exception + exit_line.format(code=1)})
    assert not any("does not say why" in h.title for h in echoed.hypotheses)
    assert echoed.hypotheses[0].cause_id == "config.unknown"
    (tmp_path / "signal").mkdir()
    crashed = analyze_files(
        tmp_path / "signal", {"job.log": exception + exit_line.format(code=-11)}
    )
    assert any("does not say why" in h.title for h in crashed.hypotheses)
