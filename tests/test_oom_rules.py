"""OOM rules end to end: log text and memory dumps in, ranked oom.* hypotheses out.

Messages are torch's and NCCL's exact formats as users reported them; tracebacks use the
real frame names of torch's code paths (optimizer step, torch.load, FSDP unshard).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import analyze_files, triage_cli
from triage.engine import follow
from triage.models import Finding, Report
from triage.playbooks import get_playbook

FIXTURES = Path(__file__).parent / "fixtures" / "memory"
TORCH = "/usr/local/lib/python3.10/dist-packages/torch"

OPTIMIZER_OOM = f"""\
[rank0]:Traceback (most recent call last):
[rank0]:  File "/home/user/project/train.py", line 212, in <module>
[rank0]:    main()
[rank0]:  File "/home/user/project/train.py", line 180, in main
[rank0]:    optimizer.step()
[rank0]:  File "{TORCH}/optim/optimizer.py", line 373, in wrapper
[rank0]:    out = func(*args, **kwargs)
[rank0]:  File "{TORCH}/optim/adamw.py", line 184, in step
[rank0]:    adamw(
[rank0]:  File "{TORCH}/optim/adamw.py", line 599, in _multi_tensor_adamw
[rank0]:    exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)
[rank0]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 1 has a total capacity of 93.02 GiB of which 1.18 GiB is free. Process 2752205 has 91.82 GiB memory in use. Of the allocated memory 90.63 GiB is allocated by PyTorch, and 120.54 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""

LEGACY_CAPACITY = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.14 GiB (GPU 5; 31.75 "
    "GiB total capacity; 28.28 GiB already allocated; 1.95 GiB free; 28.28 GiB reserved in total "
    "by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
)

FRAGMENTED = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a "
    "total capacty of 6.00 GiB of which 0 bytes is free. Of the allocated memory 2.93 GiB is "
    "allocated by PyTorch, and 2.30 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
)

# The process itself, seen from the host's pid namespace: NVML lists it as "Process N".
CONTAINER_SELF = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 496.00 MiB. GPU 0 has a "
    "total capacty of 14.75 GiB of which 235.06 MiB is free. Process 20398 has 14.52 GiB memory "
    "in use. Of the allocated memory 14.06 GiB is allocated by PyTorch, and 330.42 MiB is "
    "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
    "PYTORCH_CUDA_ALLOC_CONF\n"
)

OTHER_PROCESS = (
    "RuntimeError: CUDA out of memory. Tried to allocate 60.00 MiB (GPU 0; 11.17 GiB total "
    "capacity; 505.96 MiB already allocated; 12.50 MiB free; 530.00 MiB reserved in total by "
    "PyTorch)\n"
)

OTHER_PROCESS_LISTED = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.20 GiB is free. Process 123 has 60.00 GiB memory in use. "
    "Including non-PyTorch memory, this process has 17.94 GiB memory in use. Of the allocated "
    "memory 16.50 GiB is allocated by PyTorch, and 612.00 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)

STRAY_CONTEXTS = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 572.00 MiB. GPU 0 has "
    "a total capacity of 39.49 GiB of which 321.31 MiB is free. Process 3721648 has 414.00 MiB "
    "memory in use. Including non-PyTorch memory, this process has 37.46 GiB memory in use. "
    "Process 1374765 has 414.00 MiB memory in use. Process 1374763 has 414.00 MiB memory in use. "
    "Process 1374764 has 414.00 MiB memory in use. Of the allocated memory 36.04 GiB is "
    "allocated by PyTorch, and 321.37 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)

TORCH_LOAD = f"""\
Traceback (most recent call last):
  File "/srv/job/resume.py", line 88, in <module>
    restore(args)
  File "/srv/job/resume.py", line 61, in restore
    state = torch.load(args.checkpoint)
  File "{TORCH}/serialization.py", line 1025, in load
    return _load(opened_zipfile,
  File "{TORCH}/serialization.py", line 1446, in _load
    result = unpickler.load()
  File "{TORCH}/serialization.py", line 1416, in persistent_load
    typed_storage = load_tensor(dtype, nbytes, key, _maybe_decode_ascii(location))
  File "{TORCH}/serialization.py", line 1390, in load_tensor
    wrap_storage=restore_location(storage, location),
  File "{TORCH}/serialization.py", line 390, in default_restore_location
    result = fn(storage, location)
  File "{TORCH}/serialization.py", line 270, in _cuda_deserialize
    return obj.cuda(device)
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 2.42 GiB already allocated; 26.12 MiB free; 2.75 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF
"""

FSDP_UNSHARD = f"""\
[rank2]:Traceback (most recent call last):
[rank2]:  File "/work/llm/train_fsdp.py", line 140, in <module>
[rank2]:    loss = model(batch).loss
[rank2]:  File "{TORCH}/nn/modules/module.py", line 1553, in _call_impl
[rank2]:    return forward_call(*args, **kwargs)
[rank2]:  File "{TORCH}/distributed/fsdp/fully_sharded_data_parallel.py", line 849, in forward
[rank2]:    args, kwargs = _pre_forward(
[rank2]:  File "{TORCH}/distributed/fsdp/_runtime_utils.py", line 381, in _pre_forward
[rank2]:    unshard_fn(state, handle)
[rank2]:  File "{TORCH}/distributed/fsdp/_runtime_utils.py", line 416, in _pre_forward_unshard
[rank2]:    _unshard(state, handle, state._unshard_stream, state._pre_unshard_stream)
[rank2]:  File "{TORCH}/distributed/fsdp/_runtime_utils.py", line 300, in _unshard
[rank2]:    handle.unshard()
[rank2]:  File "{TORCH}/distributed/fsdp/_flat_param.py", line 1312, in unshard
[rank2]:    unsharded_flat_param = self._alloc_padded_unsharded_flat_param()
[rank2]:  File "{TORCH}/distributed/fsdp/_flat_param.py", line 1339, in _alloc_padded_unsharded_flat_param
[rank2]:    _alloc_storage(unsharded_flat_param, flat_param._padded_unsharded_size)
[rank2]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB. GPU 2 has a total capacity of 79.15 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this process has 76.02 GiB memory in use. Of the allocated memory 73.90 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""


def shared_gpu_rank(rank: int, base: float = 2.41) -> str:
    """torch < 2.1 on a 4-rank job whose ranks never called set_device: all on GPU 0."""
    used = base + 0.01 * rank
    return (
        f"[rank{rank}]:RuntimeError: CUDA out of memory. Tried to allocate 256.00 MiB (GPU 0; "
        f"31.75 GiB total capacity; {used:.2f} GiB already allocated; 90.00 MiB free; "
        f"{used + 0.2:.2f} GiB reserved in total by PyTorch) If reserved memory is >> allocated "
        "memory try setting max_split_size_mb to avoid fragmentation.  See documentation for "
        "Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
    )


ELASTIC_SIGKILL = """\
[2024-03-05 10:00:01,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 1 (pid: 4002) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-05_10:00:01
  host      : node1
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4002)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4002
============================================================
"""

DMESG = (
    "[Tue Mar  5 10:00:00 2024] Out of memory: Killed process 4002 (python3) "
    "total-vm:98765432kB, anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:1000 "
    "pgtables:123456kB oom_score_adj:0\n"
)

DATALOADER_KILLED = """\
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/signal_handling.py", line 66, in handler
    _error_if_any_worker_fails()
RuntimeError: DataLoader worker (pid 9833) is killed by signal: Killed.
slurmstepd: error: Detected 1 oom-kill event(s) in StepId=36358.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.
"""


def run_oom(tmp_path: Path, files: dict[str, str], *extra: Path) -> Report:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / name) for name in files] + [str(p) for p in extra]
    return follow(get_playbook("oom"), {"paths": paths})


def causes(report: Report) -> dict[str, Finding]:
    return {h.cause_id: h for h in report.hypotheses}


def top(report: Report) -> Finding:
    assert report.hypotheses, report.gaps
    return report.hypotheses[0]


def test_optimizer_step_that_does_not_fit(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": OPTIMIZER_OOM})
    verdict = top(report)
    assert verdict.cause_id == "oom.capacity"
    assert verdict.ranks == [0]
    assert verdict.location is not None
    assert (verdict.location.file, verdict.location.line) == ("/home/user/project/train.py", 180)
    assert "optimizer step" in verdict.summary and "90.63 GiB" in verdict.summary
    assert "oom.other_process" not in causes(report)  # Process 2752205 is this process


def test_legacy_numbers_with_nothing_to_defragment(tmp_path: Path) -> None:
    verdict = top(run_oom(tmp_path, {"rank5.log": LEGACY_CAPACITY}))
    assert verdict.cause_id == "oom.capacity" and verdict.confidence >= 0.7
    assert verdict.ranks == [5]
    assert "3.14 GiB" in verdict.summary


def test_container_pid_is_recognised_as_this_process(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": CONTAINER_SELF})
    assert top(report).cause_id == "oom.capacity"
    assert "oom.other_process" not in causes(report)


# meta-pytorch/torchtune#2071: NVML cannot see the process from inside its container and
# reports "0 bytes", less than the 22.61 GiB its own allocator reserved.
UNSEEN_SELF = (
    "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 5 has"
    " a total capacity of 23.43 GiB of which 210.06 MiB is free. Including non-PyTorch memory,"
    " this process has 0 bytes memory in use. Of the allocated memory 22.41 GiB is allocated by"
    " PyTorch, and 206.09 MiB is reserved by PyTorch but unallocated.\n"
)


def test_a_process_nvml_cannot_see_is_not_memory_held_elsewhere(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": UNSEEN_SELF})
    assert top(report).cause_id == "oom.capacity"
    assert "oom.other_process" not in causes(report)


def test_fragmentation_beats_capacity_and_both_say_what_separates_them(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": FRAGMENTED})
    found = causes(report)
    assert top(report).cause_id == "oom.fragmentation"
    assert "2.30 GiB" in found["oom.fragmentation"].summary
    assert "oom.capacity" in found
    assert found["oom.fragmentation"].confirm and found["oom.capacity"].confirm
    assert "expandable_segments" in found["oom.fragmentation"].fix


def test_memory_held_outside_the_process(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": OTHER_PROCESS})
    verdict = top(report)
    assert verdict.cause_id == "oom.other_process"
    assert "nvidia-smi" in verdict.fix


def test_listed_other_process(tmp_path: Path) -> None:
    verdict = top(run_oom(tmp_path, {"train.log": OTHER_PROCESS_LISTED}))
    assert verdict.cause_id == "oom.other_process" and verdict.confidence >= 0.8
    assert "process 123 holds 60.00 GiB" in verdict.summary


def listing(*held: tuple[int, str]) -> str:
    """OTHER_PROCESS_LISTED with its one process replaced by these (pid, size) entries."""
    entries = " ".join(f"Process {pid} has {size} memory in use." for pid, size in held)
    return OTHER_PROCESS_LISTED.replace("Process 123 has 60.00 GiB memory in use.", entries)


def test_processes_launched_in_a_row_are_ranks_of_one_job(tmp_path: Path) -> None:
    """Pids that follow each other, each holding a different amount: workers one launcher
    started, the job's other ranks on this GPU (a never-seen report's shape); an earlier
    run's ranks left behind stand beside it."""
    held = ((1563103, "9.89 GiB"), (1563102, "35.03 GiB"), (1563104, "23.79 GiB"))
    report = run_oom(tmp_path, {"train.log": listing(*held)})
    found = causes(report)
    assert (top(report).cause_id, top(report).confidence) == ("oom.same_device", 0.55)
    assert "1563103 (9.89 GiB)" in top(report).summary
    assert found["oom.other_process"].confidence < 0.55


def test_processes_far_apart_are_other_jobs(tmp_path: Path) -> None:
    held = ((1563103, "30.00 GiB"), (2210, "30.00 GiB"))
    verdict = top(run_oom(tmp_path, {"train.log": listing(*held)}))
    assert (verdict.cause_id, verdict.confidence) == ("oom.other_process", 0.8)


def test_stray_contexts_of_other_ranks_are_a_second_hypothesis(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": STRAY_CONTEXTS})
    found = causes(report)
    assert top(report).cause_id == "oom.capacity"
    assert found["oom.same_device"].confidence < found["oom.capacity"].confidence
    assert "4 other processes" in found["oom.same_device"].summary


def test_torch_load_without_map_location(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"rank3.log": TORCH_LOAD})
    verdict = top(report)
    assert verdict.cause_id == "oom.same_device"
    assert verdict.ranks == [3]
    assert verdict.location is not None and verdict.location.line == 61
    assert "map_location" in verdict.fix
    # the same numbers also fit another process; both are reported
    assert "oom.other_process" in causes(report)


def test_pasted_traceback_without_header_and_cut_message(tmp_path: Path) -> None:
    pasted = TORCH_LOAD.split("\n", 1)[1]  # no "Traceback (most recent call last):"
    pasted = pasted[: pasted.index("26.12 MiB f") + len("26.12 MiB f")] + "\n[...]\n"
    verdict = top(run_oom(tmp_path, {"issue.txt": pasted}))
    assert verdict.cause_id == "oom.same_device"
    assert verdict.location is not None and verdict.location.line == 61


def test_ranks_crowding_one_gpu(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"job.log": "".join(shared_gpu_rank(r) for r in range(4))})
    verdict = top(report)
    assert verdict.cause_id == "oom.same_device"
    assert verdict.ranks == [0, 1, 2, 3]
    assert "GPU 0" in verdict.summary


def test_ranks_on_their_own_gpus_are_not_crowding(tmp_path: Path) -> None:
    text = "".join(
        shared_gpu_rank(r)
        .replace("(GPU 0;", f"(GPU {r};")
        .replace("90.00 MiB free", "29.0 GiB free")
        for r in range(4)
    )
    assert "oom.same_device" not in causes(run_oom(tmp_path, {"job.log": text}))


def test_listed_processes_that_are_ranks_of_the_job(tmp_path: Path) -> None:
    rank0 = OTHER_PROCESS_LISTED.replace("Process 123 has", "Process 4002 has")
    launcher = ELASTIC_SIGKILL.replace("exitcode  : -9", "exitcode  : 1").replace(
        "Signal 9 (SIGKILL) received by PID 4002", "To enable traceback see: https://pytorch.org"
    )
    report = run_oom(tmp_path, {"rank0.log": "[rank0]:" + rank0, "launcher.log": launcher})
    verdict = top(report)
    assert verdict.cause_id == "oom.same_device" and verdict.confidence >= 0.9
    assert verdict.ranks == [0, 1]
    assert "pid 4002 (rank 1)" in verdict.summary


BARRIER_OOM = f"""\
[rank3]:Traceback (most recent call last):
[rank3]:  File "/srv/app/ddp_main.py", line 33, in <module>
[rank3]:    dist.barrier()
[rank3]:  File "{TORCH}/distributed/c10d_logger.py", line 79, in wrapper
[rank3]:    return func(*args, **kwargs)
[rank3]:  File "{TORCH}/distributed/distributed_c10d.py", line 3936, in barrier
[rank3]:    work = default_pg.barrier(opts=opts)
[rank3]:RuntimeError: CUDA error: out of memory
[rank3]:CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
[rank3]:For debugging consider passing CUDA_LAUNCH_BLOCKING=1
"""


def test_out_of_memory_while_setting_up_the_group(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": BARRIER_OOM})
    verdict = top(report)
    assert verdict.cause_id == "oom.same_device" and verdict.ranks == [3]
    assert "barrier" in verdict.summary
    assert causes(report)["oom.capacity"].confidence < verdict.confidence


def test_one_visible_gpu_per_rank_is_not_crowding(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES per rank: every rank calls its own full GPU "GPU 0"."""
    report = run_oom(tmp_path, {"job.log": "".join(shared_gpu_rank(r, 30.1) for r in range(4))})
    found = causes(report)
    assert top(report).cause_id == "oom.capacity"
    assert found["oom.same_device"].confidence < 0.5


def test_fsdp_unshard_is_a_collective_peak(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": FSDP_UNSHARD})
    verdict = top(report)
    assert verdict.cause_id == "oom.collective_peak"
    assert verdict.ranks == [2]
    assert verdict.location is not None and verdict.location.file == "/work/llm/train_fsdp.py"
    assert "unshard" in verdict.summary


def test_sigkill_and_the_oom_killer_are_host_oom(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"launcher.log": ELASTIC_SIGKILL, "dmesg.txt": DMESG})
    verdict = top(report)
    assert verdict.cause_id == "oom.host" and verdict.confidence >= 0.85
    alone = tmp_path / "alone"
    alone.mkdir()
    sigkill_only = top(run_oom(alone, {"launcher.log": ELASTIC_SIGKILL}))
    assert sigkill_only.cause_id == "oom.host" and sigkill_only.ranks == [1]
    assert 0.5 <= sigkill_only.confidence < verdict.confidence


def test_a_sigkill_line_cut_after_its_exit_code_is_still_a_sigkill(tmp_path: Path) -> None:
    """A paste that lost the rank and pid after torchelastic's exit code."""
    line = ELASTIC_SIGKILL.splitlines()[0].replace(
        "local_rank: 1 (pid: 4002) of binary: /usr/bin/python3", "local_rankusr/bin/python3"
    )
    verdict = top(run_oom(tmp_path, {"launcher.log": line + "\n"}))
    assert verdict.cause_id == "oom.host" and verdict.confidence >= 0.5
    assert "exitcode: -9" in verdict.summary


def test_dataloader_worker_killed(tmp_path: Path) -> None:
    verdict = top(run_oom(tmp_path, {"train.log": DATALOADER_KILLED}))
    assert verdict.cause_id == "oom.host" and verdict.confidence >= 0.85
    assert "DataLoader workers" in verdict.fix


@pytest.mark.parametrize(
    "line",
    [
        "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n",
        "MemoryError\n",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't "
        "allocate memory: you tried to allocate 3481600000 bytes. Error code 12 (Cannot allocate "
        "memory)\n",
        "Epoch 3:  41%|####      | 410/1000 [10:12<14:40,  1.49s/it]\nKilled\n",
        "srun: error: gpu-node-17: task 3: Out Of Memory\n",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n",
        "[rank: 1] Child process with PID 5174 terminated with code -9. Forcefully terminating"
        " all other processes to avoid zombies 🧟\n",
        "worker 3 exited with exit code -9\n",
        "Process 4002 was killed by signal 9\n",
        # the memory limits a scheduler, the kernel or the kubelet enforce, in their words
        "slurmstepd: error: Job 4123 exceeded memory limit (52428800 > 51200000), being killed\n",
        "slurmstepd: error: Exceeded step memory limit at some point.\n",
        "slurmstepd: error: Some of your processes may have been killed by the cgroup"
        " out-of-memory handler.\n",
        "[812345.678901] oom_reaper: reaped process 4242 (python), now anon-rss:0kB,"
        " file-rss:0kB, shmem-rss:0kB\n",
        "Message: The node was low on resource: memory. Container trainer was using 61234567Ki,"
        " which exceeds its request of 32Gi.\n",
        "Memory on the node (IP: 10.0.0.1, ID: 5c1f) where the task (actor ID: 8a2b, name="
        "Worker.__init__, pid=4242, memory used=61.2GB) was running was 240.10GB / 251.60GB"
        " (0.954), which exceeds the memory usage threshold of 0.95. Ray killed this worker\n",
        "trainer-0  Exited (137) 3 minutes ago\n",
        "[  123.456789] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        "mems_allowed=0-1,oom_memcg=/slurm/uid_1000/job_123,task=python,pid=12345,uid=1000\n",
    ],
)
def test_host_allocation_failures(tmp_path: Path, line: str) -> None:
    assert top(run_oom(tmp_path, {"train.log": line})).cause_id == "oom.host"


def test_sigkill_after_a_gpu_oom_is_not_host_oom(tmp_path: Path) -> None:
    launcher = ELASTIC_SIGKILL.replace("rank      : 1", "rank      : 0")
    report = run_oom(tmp_path, {"rank0.log": LEGACY_CAPACITY, "launcher.log": launcher})
    found = causes(report)
    assert top(report).cause_id == "oom.capacity"
    assert found["oom.host"].confidence < 0.5


def test_a_gpu_oom_without_numbers_is_a_weak_capacity_guess(tmp_path: Path) -> None:
    text = (
        "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
    )
    verdict = top(run_oom(tmp_path, {"nccl.log": text}))
    assert verdict.cause_id == "oom.capacity" and verdict.confidence < 0.5


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: No available memory for the cache blocks. Try increasing"
        " `gpu_memory_utilization` when initializing the engine.",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens"
        " that can be stored in KV cache (12288). Try increasing `gpu_memory_utilization` or"
        " decreasing `max_model_len` when initializing the engine.",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ],
)
def test_an_inference_engine_without_room_for_its_kv_cache(tmp_path: Path, line: str) -> None:
    """vLLM and SGLang size their KV cache from a share of the GPU: no room left is the
    working set not fitting, with the engine's own knobs as the fix."""
    text = f'Traceback (most recent call last):\n  File "/job/rollout.py", line 7, in <module>\n{line}\n'
    verdict = top(analyze_files(tmp_path, {"rollout.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("oom.capacity", 0.6)
    assert "KV cache" in verdict.title and "gpu_memory_utilization" in verdict.fix


def test_no_oom_in_the_logs_falls_back_to_unknown(tmp_path: Path) -> None:
    verdict = top(run_oom(tmp_path, {"train.log": "epoch 1 loss 0.5\nepoch 2 loss 0.4\n"}))
    assert verdict.cause_id == "oom.unknown"


def test_the_same_error_twice_is_one_event(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"rank0.log": OPTIMIZER_OOM, "rank0.err": OPTIMIZER_OOM})
    assert top(report).cause_id == "oom.capacity"
    assert "Rank 0 ran" in top(report).summary


# --- memory dumps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "cause"),
    [
        ("fragmented", "oom.fragmentation"),
        ("capacity", "oom.capacity"),
        ("collective", "oom.collective_peak"),
        ("leak", "oom.leak"),
        ("leak_trace", "oom.leak"),
        ("same_device", "oom.same_device"),
    ],
)
def test_snapshots_decide(folder: str, cause: str) -> None:
    report = follow(get_playbook("oom"), {"paths": [str(FIXTURES / folder)]})
    assert [r.tool for r in report.tool_runs] == ["collect_files", "read_memory"]
    assert top(report).cause_id == cause


def test_snapshot_findings_name_the_user_line() -> None:
    leak = top(follow(get_playbook("oom"), {"paths": [str(FIXTURES / "leak")]}))
    assert leak.location is not None and (leak.location.file, leak.location.line) == (
        "/work/train.py",
        63,
    )
    frag = top(follow(get_playbook("oom"), {"paths": [str(FIXTURES / "fragmented")]}))
    assert "512.00 MiB" in frag.summary and "2.00 GiB" in frag.summary


def test_a_log_and_its_snapshot_together(tmp_path: Path) -> None:
    report = run_oom(tmp_path, {"train.log": FRAGMENTED}, FIXTURES / "fragmented")
    verdict = top(report)
    assert verdict.cause_id == "oom.fragmentation" and verdict.confidence >= 0.85
    assert {r.tool for r in report.tool_runs} >= {"scan_logs", "read_memory"}


# --- CLI ---------------------------------------------------------------------------------


def cli_top(*args: str) -> dict[str, object]:
    done = subprocess.run(
        triage_cli("oom", *args, "--json"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    hypotheses = json.loads(done.stdout)["hypotheses"]
    assert hypotheses
    top: dict[str, object] = hypotheses[0]
    return top


def test_cli_oom_on_a_log(tmp_path: Path) -> None:
    log = tmp_path / "rank3.log"
    log.write_text(TORCH_LOAD)
    verdict = cli_top(str(log))
    assert verdict["cause_id"] == "oom.same_device" and verdict["ranks"] == [3]


def test_cli_oom_on_a_snapshot_folder() -> None:
    assert cli_top(str(FIXTURES / "fragmented"))["cause_id"] == "oom.fragmentation"


EMPTY_CACHE_OOM = """\
Traceback (most recent call last):
  File "/env/lib/python3.8/site-packages/ray/train/torch/config.py", line 118, in _shutdown_torch
    torch.cuda.empty_cache()
  File "/env/lib/python3.8/site-packages/torch/cuda/memory.py", line 114, in empty_cache
    torch._C._cuda_emptyCache()
RuntimeError: CUDA error: out of memory
"""


def test_an_oom_inside_empty_cache_is_a_context_made_on_gpu_0(tmp_path: Path) -> None:
    verdict = top(run_oom(tmp_path, {"worker.log": EMPTY_CACHE_OOM}))
    assert (verdict.cause_id, verdict.confidence) == ("oom.same_device", 0.55)
    assert "empty_cache" in verdict.summary and "set_device" in verdict.fix


TEARDOWN = """\
[2024-01-04 20:52:31,132] [INFO] [RANK 0]  > number of parameters on model parallel rank 0: 4520036800
[2024-01-04 20:53:00,233] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 136077
[2024-01-04 20:53:01,364] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 136078
"""


@pytest.mark.parametrize(
    "text",
    [
        TEARDOWN,
        "W1126 16:48:06.869000 29210 torch/distributed/elastic/multiprocessing/api.py:1028]"
        " Sending process 29293 closing signal SIGTERM\n",
    ],
    ids=["deepspeed", "torchrun"],
)
def test_a_teardown_with_no_traceback_is_a_worker_killed_silently(
    tmp_path: Path, text: str
) -> None:
    verdict = top(run_oom(tmp_path, {"launcher.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("oom.host", 0.3)
    assert "no process printed a traceback" in verdict.summary


def test_a_teardown_after_a_traceback_is_no_silent_kill(tmp_path: Path) -> None:
    text = 'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n' + (
        "KeyError: 'labels'\n" + TEARDOWN
    )
    assert "oom.host" not in causes(run_oom(tmp_path, {"launcher.log": text}))


def test_a_teardown_after_a_watchdog_timeout_is_no_silent_kill(tmp_path: Path) -> None:
    timeout = (
        "[rank1]:[E1126 16:48:06.1 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=2, NumelOut=2,"
        " Timeout(ms)=600000) ran for 600007 milliseconds before timing out.\n"
    )
    assert "oom.host" not in causes(run_oom(tmp_path, {"launcher.log": timeout + TEARDOWN}))
