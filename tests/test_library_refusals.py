"""torch's and NCCL's own refusals of a backend, a device, a layout, a launch variable or a
peer name their cause: the recordings of tests/fixtures/cpu (torch 2.14.1 on a host without a GPU) read as
a user would get them, and the wordings no GPU-less host can produce, each checked against
torch's sources (ProcessGroupNCCL's dtype table and sparse path, torch.cuda's NVML queries,
FSDP's device checks, DTensor's shape helpers, ShardedTensor's load check), DeepSpeed's (its ZeRO
checkpoint's world-size check, as a user pasted it) or NCCL's (init.cc, ras/ras.cc,
bootstrap.cc, mnnvl.cc, graph/paths.cc, transport/nvls.cc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_cli, analyze_files

CPU = REPO / "tests" / "fixtures" / "cpu"


@pytest.mark.parametrize("case", ["all_reduce", "object_list"])
def test_gloo_receiving_another_size_is_a_shape_mismatch_not_the_aborting_rank(case: str) -> None:
    """Rank 0 aborts on gloo's check and rank 1 sees the reset: the abort is the message, not
    a crash of rank 0's own making."""
    top, *rest = analyze_cli(CPU / f"gloo_sizes_{case}.log")["hypotheses"]
    assert (top["cause_id"], top["confidence"]) == ("hang.shape_mismatch", 0.7)
    assert "bytes arrived" in top["title"] and "does not say which rank" in top["summary"]
    assert top["location"]["file"].endswith("gloo_sizes.py")
    assert all(h["confidence"] < top["confidence"] for h in rest)


def test_a_launchers_own_traceback_is_not_the_users_line() -> None:
    """torchrun's ChildFailedError traceback starts in bin/torchrun: no user code there."""
    top = analyze_cli(CPU / "virtual_local_rank.log")["hypotheses"][0]
    assert top["cause_id"] == "config.device_assignment" and top["confidence"] == 0.8
    assert top["location"] is None


def test_accelerates_shape_report_names_the_process_off_the_majority() -> None:
    top = analyze_cli(CPU / "accelerate_shapes.log")["hypotheses"][0]
    assert (top["cause_id"], top["ranks"], top["confidence"]) == ("hang.shape_mismatch", [2], 0.8)
    assert "process 2: [9, 5]" in top["summary"] and top["location"]["line"] == 12


def test_with_no_majority_shape_no_process_is_blamed(tmp_path: Path) -> None:
    text = (
        "DistributedOperationException: Cannot apply desired operation due to shape mismatches."
        " All shapes across devices must be valid.\n\nOperation: `accelerate.utils.operations"
        ".gather`\nInput shapes:\n  - Process 0: [16, 5]\n  - Process 1: [9, 5]\n"
    )
    top = analyze_files(tmp_path, {"rank0.log": text}).hypotheses[0]
    assert (top.cause_id, top.ranks, top.confidence) == ("hang.shape_mismatch", [], 0.7)
    assert "no shape has a majority" in top.summary


@pytest.mark.parametrize(
    ("name", "cause", "words"),
    [
        ("fsdp_cpu.log", "config.backend_device", "no GPU is usable"),
        ("accelerate_split_batches.log", "config.world_size_mismatch", "not a multiple of the 4"),
        ("accelerate_parallelism.log", "config.world_size_mismatch", "larger than the world"),
        ("lightning_devices.log", "config.world_size_mismatch", "Lightning's devices"),
        ("dtensor_view.log", "config.world_size_mismatch", "does not divide evenly"),
        ("group_size.log", "config.world_size_mismatch", "group size is outside the world"),
        ("node_local_rank.log", "config.env_missing", "LOCAL_RANK not set"),
        ("cuda_checkpoint.log", "config.backend_device", "no GPU is usable in this process"),
    ],
)
def test_each_recorded_refusal_names_its_cause(name: str, cause: str, words: str) -> None:
    top = analyze_cli(CPU / name)["hypotheses"][0]
    assert top["cause_id"] == cause and words in top["title"]
    assert top["location"]["file"].endswith(
        ("cpu_misuse.py", "accelerate_setup.py", "lightning_devices.py")
    )


@pytest.mark.parametrize(
    ("line", "cause", "words"),
    [
        (
            "RuntimeError: Input tensor data type is not supported for NCCL process group: UInt32",
            "config.backend_device",
            "(UInt32)",
        ),
        (
            "RuntimeError: NCCL does not support all_gather with sparse tensors. Please use"
            " dense tensors instead.",
            "config.backend_device",
            "all_gather on sparse tensors",
        ),
        (
            "ValueError: We detected accelerator mtia on your machine. But we don't know which"
            " communication backend to use for this accelerator. Please specify the `backend`"
            " argument in the `init_process_group` call.",
            "config.backend_device",
            "mtia accelerator",
        ),
        (
            "ValueError: Tried to launch on distributed with multinode, but `MASTER_ADDR` env was"
            " not set, please try exporting rank 0's hostname as `MASTER_ADDR`",
            "config.env_missing",
            "MASTER_ADDR not set",
        ),
        (
            "NotImplementedError: Using RTX 4000 series doesn't support faster communication"
            ' broadband via P2P or IB. Please set `NCCL_P2P_DISABLE="1"` and `NCCL_IB_DISABLE="1"'
            " or use `accelerate launch` which will do this automatically.",
            "comm.p2p_unsupported",
            "peer access between local GPUs failed",
        ),
        (
            "RuntimeError: Distributed package doesn't have XCCL built in",
            "config.backend_device",
            "not available on this machine",
        ),
        (
            "ValueError: monitored_barrier requires a group with a CPU-capable backend (e.g."
            " GLOO).",
            "config.backend_device",
            "runs on gloo",
        ),
        (
            "ValueError: device_id 4 is out of range. Please use a device index less than the"
            " number of accelerators available: 2.",
            "config.device_assignment",
            "GPU index its host does not have",
        ),
        (
            "RuntimeError: FSDP only supports single device modules but got params on"
            " {device(type='cpu'), device(type='cuda', index=0)}",
            "config.device_assignment",
            "more than one device",
        ),
        (
            "RuntimeError: device 3 is not visible (CUDA_VISIBLE_DEVICES=[0, 1])",
            "config.device_assignment",
            "CUDA_VISIBLE_DEVICES lists",
        ),
        (
            "AssertionError: Global dim 13 not divisible by mesh size 2",
            "config.world_size_mismatch",
            "does not divide evenly",
        ),
        (
            "RuntimeError: Global world size at save time was 8, but at load time was 4",
            "config.world_size_mismatch",
            "(8 saved, 4 now)",
        ),
        (
            "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used"
            " a DP world size of 4 but the current world size is 1. Automatic adjustment of"
            " ZeRO's optimizer state partitioning with a new world size is not currently"
            " supported.",
            "config.world_size_mismatch",
            "another DP world size (4 saved, 1 now)",
        ),
        (
            "AssertionError: Number of layers should be divisible by the pipeline-model-parallel"
            " size",
            "config.world_size_mismatch",
            "Number of layers does not split evenly over the pipeline-model-parallel size",
        ),
        (
            "AssertionError: output_size (4096) must be divisible by tp_size (3)",
            "config.world_size_mismatch",
            "over the tp_size",
        ),
        (
            "ConnectionError: Tried to launch distributed communication on port `29500`, but"
            " another process is utilizing it. Please specify a different port (such as using"
            " the `--main_process_port` flag or specifying a different `main_process_port` in"
            " your config file) and rerun your script.",
            "comm.rendezvous",
            "port 29500 is already in use",
        ),
        (
            "AssertionError: num_heads (4) must be divisible by ulysses sequence size(3)",
            "config.world_size_mismatch",
            "over the ulysses sequence size",
        ),
        (
            "ValueError: `global_batch_size` (10) is not divisible by `micro_batch_size (2) x"
            " data_parallel_size (4)`",
            "config.world_size_mismatch",
            "global_batch_size (10) does not split evenly over the data_parallel_size",
        ),
        (
            "ValueError: tensor_parallel_size (4) must divide world size (6) evenly.",
            "config.world_size_mismatch",
            "tensor_parallel_size does not divide the world size",
        ),
        (
            "AssertionError: TP*CP*DP*PP=1*1*2*2=4 != WORLD_SIZE=8",
            "config.world_size_mismatch",
            "do not multiply to WORLD_SIZE",
        ),
        (
            "RuntimeError: You can't specify a device index when using distributed training."
            " Device specified is cuda:1 but local rank is:0",
            "config.device_assignment",
            "differs from the process's local rank",
        ),
        (
            "RuntimeError: Attempting to use the same CUDA device for multiple distinct"
            " roles/ranks within the same communicator. Ensure that trainer is using different"
            " devices than vLLM server.",
            "config.device_assignment",
            "share one GPU",
        ),
        (
            "MisconfigurationException: You set `devices=4` in Lightning, but the number of tasks"
            " per node configured in SLURM `--ntasks-per-node=1` does not match. HINT: Set"
            " `devices=1`.",
            "config.world_size_mismatch",
            "Lightning's devices",
        ),
        (
            "RuntimeError: You set `--ntasks=8` in your SLURM bash script, but this variable is"
            " not supported. HINT: Use `--ntasks-per-node=8` instead.",
            "config.launcher_args",
            "--ntasks does not tell Lightning",
        ),
        (
            "MisconfigurationException: You requested to find 8 devices but this machine only"
            " has 4 GPUs.",
            "config.device_assignment",
            "more GPUs than the process sees",
        ),
        (
            "RuntimeError: Lightning attempted to launch new distributed processes with"
            " `local_rank > 0`. This should not happen.",
            "config.launcher_args",
            "already has a local rank",
        ),
        (
            "ValueError: ParallelismConfig total_size (8) does not match num_processes (4)."
            " Please adjust dp_replicate_size/ dp_shard_size/tp_size/cp_size/sp_size.",
            "config.world_size_mismatch",
            "do not multiply to the number of processes",
        ),
        (
            "AssertionError: Tensor parallel world size must divide num heads.",
            "config.world_size_mismatch",
            "Tensor parallel world size does not divide the num heads",
        ),
        (
            "ValueError: num_heads (28) must be divisible by attn_tp_size (8)",
            "config.world_size_mismatch",
            "does not split evenly over the attn_tp_size",
        ),
        (
            "ValueError: packed seq_len 4097 not divisible by the combined sequence-parallel"
            " world size 8 (ulysses=4 x ring=2)",
            "config.world_size_mismatch",
            "does not split evenly over the sequence-parallel world size",
        ),
        (
            "ValueError: num_gpus (6) must equal tp_size * ulysses_degree * ring_degree (4)",
            "config.world_size_mismatch",
            "do not multiply to the job's GPU count",
        ),
        (
            "AssertionError: tp_size * pp_size (8) must be equal to the world size (4)",
            "config.world_size_mismatch",
            "do not multiply to the job's GPU count",
        ),
        (
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an"
            " NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
            "config.backend_device",
            "no GPU is usable in this process",
        ),
    ],
    ids=[
        "nccl-dtype",
        "nccl-sparse",
        "accelerator-backend",
        "accelerate-master-addr",
        "accelerate-rtx-4000",
        "xccl-not-built",
        "monitored-barrier-no-gloo",
        "device-id-out-of-range",
        "fsdp-devices",
        "nvml-visible",
        "dtensor-dim",
        "checkpoint-world",
        "deepspeed-zero-checkpoint-world",
        "megatron-layers",
        "tp-output-size",
        "ulysses-heads",
        "batch-not-divisible",
        "tp-divides-world",
        "nanotron-world",
        "torchtune-device-index",
        "trl-vllm-same-gpu",
        "lightning-slurm-tasks",
        "lightning-ntasks",
        "lightning-gpus",
        "lightning-relaunch",
        "accelerate-port",
        "accelerate-parallelism",
        "tp-divides-heads",
        "attn-tp-heads",
        "sequence-parallel-length",
        "gpus-vs-product",
        "product-vs-world",
        "no-driver",
    ],
)
def test_the_refusal_names_its_cause(tmp_path: Path, line: str, cause: str, words: str) -> None:
    text = (
        f'Traceback (most recent call last):\n  File "/job/train.py", line 9, in <module>\n{line}'
    )
    top = analyze_files(tmp_path, {"rank0.log": text}).hypotheses[0]
    assert top.cause_id == cause and words in top.title, top.title
    assert top.location is not None and top.location.line == 9


@pytest.mark.parametrize(
    "line",
    [
        'docker: Error response from daemon: could not select device driver "" with'
        " capabilities: [[gpu]].",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure"
        " that the latest NVIDIA driver is installed and running.",
    ],
    ids=["docker-no-gpu-runtime", "nvidia-smi-no-driver"],
)
def test_a_host_or_container_without_a_usable_gpu(tmp_path: Path, line: str) -> None:
    top = analyze_files(tmp_path, {"job.log": line}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.backend_device", 0.7)
    assert "--gpus all" in top.fix


def test_a_variable_named_in_a_warning_is_not_a_missing_launch_variable(tmp_path: Path) -> None:
    """The same words outside an exception (a library's fallback) are no failure of the launch."""
    text = "WARNING: MASTER_ADDR is not set, using localhost\nstep 10 loss 2.31\n"
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert not [h for h in report.hypotheses if h.cause_id == "config.env_missing"]


def test_a_divisor_that_is_no_parallel_size_is_not_a_world_size_mismatch(tmp_path: Path) -> None:
    text = (
        'Traceback (most recent call last):\n  File "/job/moe.py", line 5, in <module>\n'
        "AssertionError: The number of experts must be divisible by granularity for upcycling"
        "\nAssertionError: Image size 4x4 is not divisible by tile size 4"
        "\nValueError: batch_size must equal micro_batch_size * grad_accum"
    )
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert not [h for h in report.hypotheses if h.cause_id == "config.world_size_mismatch"]


@pytest.mark.parametrize(
    ("warn", "cause", "words"),
    [
        (
            "init.cc:1043 NCCL WARN Mismatched NCCL version detected : rank 0 version 22703 rank 8"
            " version 21805",
            "comm.version_mismatch",
            "different NCCL releases",
        ),
        (
            "transport/net_ib/connect.cc:612 NCCL WARN NET/IB : Attempted to connect"
            " incompatible devices  [0]mlx5_0:1/IB and [0]mlx5_2:1/RoCE. Try selecting NICs of"
            " only one link type using NCCL_IB_HCA",
            "comm.infiniband",
            "InfiniBand transport reported a failure (Attempted to connect incompatible",
        ),
        (
            "include/alloc.h:418 NCCL WARN CUMEM not supported prior to CUDA 11.3",
            "comm.version_mismatch",
            "newer CUDA driver",
        ),
        (
            "transport/net_socket.cc:61 NCCL WARN NET/Socket : no interface found",
            "comm.wrong_interface",
            "no usable socket interface",
        ),
        (
            "bootstrap.cc:335 NCCL WARN Bootstrap Root : mismatch in info from procs, nranks 8 vs"
            " 16, nroots 1 vs 1, iroot 0 vs 0, offset 0 vs 0",
            "config.world_size_mismatch",
            "disagree on the world size",
        ),
        (
            "init.cc:1339 NCCL WARN Detected mixed local Net device counts across ranks (min 0,"
            " max 8). Set NCCL_IGNORE_NET_MISMATCH=1 to continue.",
            "comm.infiniband",
            "from 0 to 8",
        ),
        (
            "mnnvl.cc:74 NCCL WARN MNNVL (cliqueSize 72) is available but not working on this"
            " system. Check the IMEX channel configuration (/dev/nvidia-caps-imex-channels). Set"
            " NCCL_MNNVL_ENABLE=0 to ignore this issue.",
            "comm.fabric",
            "IMEX",
        ),
        (
            "graph/paths.cc:396 NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and 3."
            " This should not be the case given their connectivity, and is probably due to a"
            " hardware issue.",
            "comm.p2p_unsupported",
            "peer access",
        ),
        (
            'transport/nvls.cc:254 NCCL WARN NCCL_NVLS_ENABLE has been set to "1" and'
            " communicator has multiple ranks using the same NVML device.",
            "config.device_assignment",
            "same GPU",
        ),
        (
            "transport/net_socket.cc:578 NCCL WARN NET/Socket : peer 10.0.0.3<55321> message"
            " truncated : receiving 8388608 bytes instead of 4194304. If you believe your socket"
            " network is in healthy state, there may be a mismatch in collective sizes or"
            " environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",
            "hang.shape_mismatch",
            "different sizes to one NCCL collective (8388608 bytes arrived, 4194304 expected)",
        ),
        (
            "transport/net_ib.cc:1064 NCCL WARN NET/IB : req 0/1 tag 7 peer 10.0.0.2<43127>"
            " collective mismatch error, local size 4096 remote size 8192",
            "hang.shape_mismatch",
            "different sizes to one NCCL collective (8192 bytes arrived, 4096 expected)",
        ),
        (
            "init.cc:904 NCCL WARN Multiple Ranks are using the same GPU/Partition. Set"
            " NCCL_MULTI_RANK_GPU_ENABLE=1 to allow this.",
            "config.device_assignment",
            "same GPU",
        ),
        (
            "misc/argcheck.cc:49 NCCL WARN AllReduce : sendbuff allocated on device 1 mismatchs"
            " with NCCL device 0",
            "config.device_assignment",
            "another GPU",
        ),
        (
            "init.cc:1617 NCCL WARN NCCL library is too old. This application was compiled with"
            " NCCL version 2.28.3, but is running with NCCL library version 2.21.5.",
            "comm.version_mismatch",
            "older than the one the code was built against",
        ),
        (
            "enqueue.cc:1200 NCCL WARN FP8 reduction support begins with sm90 capable devices.",
            "config.backend_device",
            "float8",
        ),
        (
            "include/alloc.h:124 NCCL WARN Failed to CUDA malloc 67108864 bytes",
            "oom.capacity",
            "",
        ),
    ],
    ids=[
        "versions",
        "ib-other-warn",
        "cuda-too-old",
        "socket-no-interface",
        "bootstrap-nranks",
        "net-device-counts",
        "mnnvl-imex",
        "nvlink-p2p-off",
        "nvls-shared-gpu",
        "socket-size-mismatch",
        "ib-size-mismatch",
        "ranks-share-gpu",
        "buffer-on-other-gpu",
        "library-too-old",
        "fp8-before-hopper",
        "cuda-malloc",
    ],
)
def test_nccls_own_check_names_its_cause(tmp_path: Path, warn: str, cause: str, words: str) -> None:
    report = analyze_files(tmp_path, {"rank0.log": f"node1:1234:1300 [0] {warn}"})
    top = report.hypotheses[0]
    assert top.cause_id == cause and words in top.title, top.title


_DESYNC_HEAD = (
    "[rank0]:[E1127 06:50:01.123456789 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog caught"
    " collective operation timeout: WorkNCCL(SeqNum=6, OpType=ALLREDUCE, NumelIn=1024,"
    " NumelOut=1024, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
    "\t - [0] Timeout at collective: ALLREDUCE, #6\n"
)


@pytest.mark.parametrize(
    ("report", "ranks", "confidence"),
    [
        (
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync"
            " are:\n\t     [1] finished collective #5, but didn't join collective #6 (count from"
            " 1)\n",
            [1],
            0.8,
        ),
        (
            "\t - To our best knowledge, ranks [2, 3] are the lagging ranks that caused this"
            " timeout. They never joined any collectives\n",
            [2, 3],
            0.75,
        ),
    ],
    ids=["finished-not-joined", "never-joined"],
)
def test_pytorchs_desync_report_names_the_ranks_that_never_joined(
    tmp_path: Path, report: str, ranks: list[int], confidence: float
) -> None:
    """TORCH_NCCL_DESYNC_DEBUG's report, in the words of torch's TraceUtils.h (NCCL only: no
    GPU here to record it); the timeout's own hypothesis no longer calls the rank unlogged."""
    found = analyze_files(tmp_path, {"rank0.log": _DESYNC_HEAD + report}).hypotheses
    top, timeout = found[0], next(h for h in found if h.cause_id == "hang.collective_timeout")
    assert (top.cause_id, top.ranks, top.confidence) == (
        "hang.rank_not_in_collective",
        ranks,
        confidence,
    )
    assert "desync report names" in timeout.title and "not in the logs" not in timeout.title


def test_a_desync_named_rank_that_exited_is_left_to_its_exit(tmp_path: Path) -> None:
    exited = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/job/train.py", line 12, in <module>\n'
        "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: 'shard_7.bin'\n"
    )
    report = (
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync"
        " are:\n\t     [1] finished collective #5, but didn't join collective #6 (count from 1)\n"
    )
    files = {"rank0.log": _DESYNC_HEAD + report, "rank1.log": exited}
    found = analyze_files(tmp_path, files).hypotheses
    assert not [h for h in found if h.cause_id == "hang.rank_not_in_collective"]


def test_a_dump_signal_after_a_collective_timeout_is_a_hang(tmp_path: Path) -> None:
    line = (
        "[rank3]:[E1127 06:50:01.123 ProcessGroupNCCL.cpp:1495] [PG ID 0 PG GUID 0(default_pg)"
        " Rank 3] Received a dump signal due to a collective timeout from rank 0 and we will"
        " try our best to dump the debug info. Last enqueued NCCL work: 6, last completed NCCL"
        " work: 5."
    )
    top = analyze_files(tmp_path, {"rank3.log": line}).hypotheses[0]
    assert top.cause_id.startswith("hang."), top.cause_id


def test_nccl_warning_of_no_infiniband_device_is_no_infiniband_fault(tmp_path: Path) -> None:
    text = "node1:1234:1300 [0] transport/net_ib/init.cc:200 NCCL WARN NET/IB : No device found."
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert not [h for h in report.hypotheses if h.cause_id == "comm.infiniband"]


@pytest.mark.parametrize(
    "line",
    [
        "nvidia-fabricmanager.service: Main process exited, code=exited, status=1/FAILURE",
        "nvidia-fabricmanager.service: Failed with result 'exit-code'.",
    ],
)
def test_the_fabric_managers_systemd_failure_is_the_fabric(tmp_path: Path, line: str) -> None:
    """systemd's own words for the service's failure, as `systemctl status` shows them."""
    top = analyze_files(tmp_path, {"journal.log": line + "\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("comm.fabric", 0.85)


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # alibaba/Pai-Megatron-Patch#103: Megatron's ensure_divisibility, a vocabulary of
        # 151851 against tensor parallelism 4
        ("AssertionError: 151851 is not divisible by 4", "config.world_size_mismatch"),
        # microsoft/LMOps#292: 2 KV heads against a model-parallel size of 4
        (
            "[rank4]:     assert numerator % denominator == 0, '{} is not divisible by {}'.format(\n"
            "[rank4]: AssertionError: 2 is not divisible by 4",
            "config.world_size_mismatch",
        ),
        # verl's config check (verl/trainer/ppo/ray_trainer.py)
        (
            "AssertionError: real_train_batch_size (12) must be divisible by total n_gpus (8).",
            "config.world_size_mismatch",
        ),
        # NVIDIA-NeMo/Speech#8869: FP8's tile sizes, not the parallel layout
        (
            "AssertionError: FP8 execution requires 2D input matrices with height divisible by 8"
            " and width divisible by 16, but got tensor with dims=[550, 4096]",
            "config.unknown",
        ),
    ],
    ids=["megatron-vocab", "megatron-kv-heads", "verl-batch", "fp8-tiles"],
)
def test_a_count_the_layout_splits_unevenly(tmp_path: Path, line: str, cause: str) -> None:
    """A check that names only numbers or the GPU count reads weaker (0.5) than one that
    names the parallel size."""
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause
    assert top.confidence <= 0.5


@pytest.mark.parametrize(
    "line",
    [
        # verl-project/verl#1004 (Megatron's virtual pipeline; its words run 'stage' and
        # 'should' together)
        "ValueError: The number of contiguous micro-batches in a virtual pipeline"
        " stageshould range in [PP=2 , M=1]",
        # huggingface/nanotron#347
        "[rank0]: AssertionError: Number of microbatches (1) must be at least PP_SIZE-1=7"
        " when using the OneForwardOneBackwardPipelineEngine",
    ],
    ids=["megatron-vpp", "nanotron-1f1b"],
)
def test_a_pipeline_with_too_few_micro_batches(tmp_path: Path, line: str) -> None:
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.world_size_mismatch", 0.6)
    assert "micro-batches" in top.title and "pipeline-parallel size" in top.fix
