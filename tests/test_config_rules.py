"""Launch/setup errors, DDP unused parameters and NaNs: each cause named from real text.

The texts are as torch, NCCL, argparse and the training libraries print them: the gloo and
argparse ones were captured from runs of torch 2.15 here (torchrun on CPU; user script paths
shortened to /workspace), the GPU and older-version ones come from public issue reports.
Each case goes through the real engine: collect_files, scan_logs and the rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files, hypothesis, requires_torch
from triage.models import Finding, Report
from triage.readers.signatures import matches
from triage.rules.logs import config_markers

VENV = "/opt/venv/lib/python3.11/site-packages"

# --- real text: launcher and script arguments --------------------------------------------

# python -m torch.distributed.launch --nproc-per-node 2 args.py --epochs 3 (torch 2.15)
LAUNCH_HYPHEN = "\n".join(
    [
        f"{VENV}/torch/distributed/launch.py:207: FutureWarning: The module "
        "torch.distributed.launch is deprecated",
        "and will be removed in future. Use torchrun.",
        "Note that --use-env is set by default in torchrun.",
        "If your script expects `--local-rank` argument to be set, please",
        "change it to read from `os.environ['LOCAL_RANK']` instead. See ",
        "https://pytorch.org/docs/stable/distributed.html#launch-utility for ",
        "further instructions",
        "",
        "  main()",
        "usage: args.py [-h] [--local_rank LOCAL_RANK]",
        "args.py: error: unrecognized arguments: --local-rank=0 --epochs 3",
        "usage: args.py [-h] [--local_rank LOCAL_RANK]",
        "args.py: error: unrecognized arguments: --local-rank=1 --epochs 3",
        "W1121 21:03:57.363000 17597 torch/distributed/elastic/multiprocessing/api.py:1028] "
        "Sending process 17614 closing signal SIGTERM",
        "E1121 21:03:57.371000 17597 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: 2) local_rank: 0 (pid: 17613) of binary: /opt/venv/bin/python",
    ]
)

# torchrun --nproc-per-node 2 on a script that requires --local_rank (torch 2.15)
TORCHRUN_REQUIRED = """\
usage: args_req.py [-h] --local_rank LOCAL_RANK [--epochs EPOCHS]
args_req.py: error: the following arguments are required: --local_rank
usage: args_req.py [-h] --local_rank LOCAL_RANK [--epochs EPOCHS]
args_req.py: error: the following arguments are required: --local_rank
E1121 21:03:50.199000 17572 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0 (pid: 17585) of binary: /opt/venv/bin/python3.11
"""

# deepspeed launcher, torch 1.x spelling (public report)
DEEPSPEED_UNDERSCORE = (
    "text_generation_tp.py: error: unrecognized arguments: --local_rank=3\n"
    "text_generation_tp.py: error: unrecognized arguments: --local_rank=2\n"
)

HF_PARSER = (
    "ValueError: Some specified arguments are not used by the HfArgumentParser: ['--local-rank=0']"
)

# --- real text: launcher environment ------------------------------------------------------


def traceback(rank: int | None, frames: list[tuple[str, int, str, str]], error: str) -> str:
    """A Python traceback as torchrun prints it, `[rankN]:`-prefixed when rank is given."""
    lines = ["Traceback (most recent call last):"]
    for file, line, function, code in frames:
        lines += [f'  File "{file}", line {line}, in {function}', f"    {code}"]
    lines.append(error)
    prefix = f"[rank{rank}]: " if rank is not None else ""
    return "\n".join(prefix + line for line in lines) + "\n"


INIT_FRAMES = [
    ("/workspace/train.py", 2, "<module>", 'dist.init_process_group("gloo")'),
    (f"{VENV}/torch/distributed/c10d_logger.py", 83, "wrapper", "return func(*args, **kwargs)"),
    (
        f"{VENV}/torch/distributed/distributed_c10d.py",
        2714,
        "init_process_group",
        "store, rank, world_size = next(rendezvous_iterator)",
    ),
]
ENV_RANK = traceback(
    None,
    INIT_FRAMES,
    "ValueError: Error initializing torch.distributed using env:// rendezvous: environment "
    "variable RANK expected, but not set",
)
ENV_MASTER = traceback(
    None,
    INIT_FRAMES,
    "ValueError: Error initializing torch.distributed using env:// rendezvous: environment "
    "variable MASTER_ADDR expected, but not set",
)
KEY_LOCAL_RANK = traceback(
    None,
    [("/workspace/train.py", 2, "<module>", 'local_rank = int(os.environ["LOCAL_RANK"])')],
    "KeyError: 'LOCAL_RANK'",
)
TCP_RANK_MISSING = "ValueError: Error initializing torch.distributed using tcp:// rendezvous: rank parameter missing"

# --- real text: devices ------------------------------------------------------------------

# Public report (NCCL 2.18.6 through torch.distributed.launch)
DUPLICATE_GPU = """\
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.18.6
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Last error:
Duplicate GPU detected : rank 2 and rank 0 both on CUDA device 4000
"""

# Public report, NCCL_DEBUG=INFO under mpirun
DUPLICATE_GPU_WARN = (
    "[1,2]<stdout>:smc-gpu-03:29880:30398 [0] init.cc:497 NCCL WARN Duplicate GPU detected : "
    "rank 2 and rank 0 both on CUDA device 1000\n"
)

# Public report: torch.distributed.launch --nproc_per_node=2 on a one-GPU machine
INVALID_ORDINAL = """\
Traceback (most recent call last):
  File "train.py", line 107, in <module>
    torch.cuda.set_device(args.local_rank)
  File "/home/user/anaconda3/envs/lane-det/lib/python3.7/site-packages/torch/cuda/__init__.py", line 261, in set_device
    torch._C._cuda_setDevice(device)
RuntimeError: CUDA error: invalid device ordinal
"""

BUSY = (
    "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
)


def nccl_init(host: str, pid: int, rank: int, bus: str, stage: str = "START") -> str:
    """An NCCL 2.18+ init line (NCCL_DEBUG=INFO), as in public logs."""
    return (
        f"{host}:{pid}:{pid + 120} [0] NCCL INFO ncclCommInitRank comm 0x55{pid:x}a0 rank {rank} "
        f"nranks 2 cudaDev 0 nvmlDev 0 busId {bus} commId 0x996ee6f117cb8e1e - Init {stage}\n"
    )


# --- real text: world size ---------------------------------------------------------------

MESH_FRAMES = [
    ("/workspace/train.py", 4, "<module>", 'mesh = init_device_mesh("cpu", (2, 2))'),
    (
        f"{VENV}/torch/distributed/device_mesh.py",
        1725,
        "init_device_mesh",
        "device_mesh = DeviceMesh(",
    ),
    (
        f"{VENV}/torch/distributed/device_mesh.py",
        359,
        "__init__",
        "self._setup_world_group_and_device()",
    ),
    (
        f"{VENV}/torch/distributed/device_mesh.py",
        493,
        "_setup_world_group_and_device",
        "raise RuntimeError(",
    ),
]
MESH_TOO_BIG = "".join(
    traceback(
        rank,
        MESH_FRAMES,
        "RuntimeError: Mesh should not be bigger than default world size 2, but found 4 ranks!",
    )
    for rank in (0, 1)
)
SAMPLER_RANK = "ValueError: Invalid rank 3, rank should be in the interval [0, 1]"
NEW_GROUP_RANK = "ValueError: Rank 3 is out of range. Valid ranks are 0 to 0 (world_size=1)"
MEGATRON_DIVISIBLE = "[rank0]: RuntimeError: world_size (1) is not divisible by 2"
VLLM_EQUAL = (
    "[rank1]: RuntimeError: world_size (8) is not equal to tensor_model_parallel_size (4) x "
    "pipeline_model_parallel_size (1)"
)
# Public reports (torch 1.x store-based barrier)
BARRIER_EXCESS = (
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for "
    "key: store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:02:00)"
)
BARRIER_WAITING = (
    "Waiting in store based barrier to initialize process group for rank: 0, key: "
    "store_based_barrier_key:1 (world_size=4, worker_count=8, timeout=0:30:00)"
)
BARRIER_SHORT = (
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for "
    "key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:10:00)"
)

# --- real text: backend and device -------------------------------------------------------

NO_BACKEND_CPU = traceback(
    0,
    [
        ("/workspace/train.py", 3, "<module>", "dist.all_reduce(torch.ones(2))"),
        (f"{VENV}/torch/distributed/c10d_logger.py", 83, "wrapper", "return func(*args, **kwargs)"),
        (
            f"{VENV}/torch/distributed/distributed_c10d.py",
            4174,
            "all_reduce",
            "work = group.allreduce([tensor], opts)",
        ),
    ],
    "RuntimeError: No backend type associated with device type cpu",
)
NCCL_NO_GPU = traceback(
    None,
    [("/workspace/train.py", 2, "<module>", 'dist.init_process_group("nccl")')],
    "RuntimeError: nccl2 requires at least one CUDA device",
)
GLOO_REDUCE_SCATTER = "RuntimeError: ProcessGroupGloo does not support reduce_scatter"
NCCL_GATHER = "RuntimeError: ProcessGroupNCCL does not support gather"
NCCL_BASE = "RuntimeError: ProcessGroup nccldoes not support _reduce_scatter_base"
GLOO_PREMUL = "RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo"
NO_NCCL_BUILT = "RuntimeError: Distributed package doesn't have NCCL built in"
CUDA_DENSE = "RuntimeError: Tensors must be CUDA and dense"

# --- real text: DDP ----------------------------------------------------------------------

DDP_FRAMES = [
    ("/workspace/train.py", 15, "<module>", "model(torch.randn(2, 4)).sum().backward()"),
    (
        f"{VENV}/torch/nn/modules/module.py",
        1787,
        "_wrapped_call_impl",
        "return self._call_impl(*args, **kwargs)",
    ),
    (
        f"{VENV}/torch/nn/parallel/distributed.py",
        1908,
        "forward",
        "inputs, kwargs = self._pre_forward(*inputs, **kwargs)",
    ),
    (
        f"{VENV}/torch/nn/parallel/distributed.py",
        1797,
        "_pre_forward",
        "if torch.is_grad_enabled() and self.reducer._rebuild_buckets():",
    ),
]
REDUCTION = (
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting a "
    "new one. This error indicates that your module has parameters that were not used in "
    "producing loss. You can enable unused parameter detection by passing the keyword argument "
    "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by "
)
REDUCTION_TAIL = [
    "making sure all `forward` function outputs participate in calculating loss. ",
    "If you already have done the above, then the distributed data parallel module wasn't able "
    "to locate the output tensors in the return value of your module's `forward` function. "
    "Please include the loss function and the structure of the return value of `forward` of "
    "your module when reporting this issue (e.g. list, dict, iterable).",
]


def ddp_unused(rank: int, names: str | None, indices: str) -> str:
    """DDP's error on one rank; TORCH_DISTRIBUTED_DEBUG=INFO adds the names line."""
    text = traceback(rank, DDP_FRAMES, REDUCTION)
    tail = REDUCTION_TAIL[:]
    if names is not None:
        tail.append(f"Parameters which did not receive grad for rank {rank}: {names}")
    tail.append(f"Parameter indices which did not receive grad for rank {rank}: {indices}")
    return text + "".join(f"[rank{rank}]: {line}\n" for line in tail)


READY_TWICE = [
    "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of "
    "the following reasons: 1) Use of a module parameter outside the `forward` function. Please "
    "make sure model parameters are not shared across multiple concurrent forward-backward "
    "passes. or try to use _set_static_graph() as a workaround if this module graph does not "
    "change during training loop.2) Reused parameters in multiple reentrant backward passes.",
    "Parameter at index 1 with name layer.bias has been marked as ready twice. This means that "
    "multiple autograd engine  hooks have fired for this particular parameter during this iteration.",
]
STATIC_GRAPH = (
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting a "
    "new one. This error indicates that your training graph has changed in this iteration, e.g., "
    "one parameter is used in first iteration, but then got unused in the second iteration. this "
    "is not compatible with static_graph set to True."
)
LIGHTNING_UNUSED = (
    "RuntimeError: It looks like your LightningModule has parameters that were not used in "
    "producing the loss returned by training_step. If this is intentional, you must enable the "
    "detection of unused parameters in DDP, either by setting the string value "
    "`strategy='ddp_find_unused_parameters_true'` or by setting the flag in the strategy with "
    "`strategy=DDPStrategy(find_unused_parameters=True)`."
)
FIND_UNUSED_WARNING = (
    "[W reducer.cpp:1300] Warning: find_unused_parameters=True was specified in DDP constructor, "
    "but did not find any unused parameters in the forward pass. This flag results in an extra "
    "traversal of the autograd graph every iteration,  which can adversely affect performance."
)

# --- real text: NaN ----------------------------------------------------------------------

ANOMALY = f"""\
/workspace/train.py:2: UserWarning: Anomaly Detection has been enabled. This mode will increase the runtime and should only be enabled for debugging.
  with torch.autograd.detect_anomaly():
{VENV}/torch/autograd/graph.py:1113: UserWarning: Error detected in SqrtBackward0. Traceback of forward call that caused the error:
""" + traceback(
    None,
    [
        ("/workspace/train.py", 5, "<module>", "y.backward()"),
        (f"{VENV}/torch/_tensor.py", 623, "backward", "torch.autograd.backward("),
    ],
    "RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output.",
)
CLIP = (
    "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so "
    "it cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
    "anyway, set `error_if_nonfinite=False`"
)
MULTINOMIAL = "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0"
DETECTRON = (
    "FloatingPointError: Loss became infinite or NaN at iteration=2137!\n"
    "loss_dict = {'loss_cls': tensor(nan, device='cuda:0', grad_fn=<NllLossBackward>), "
    "'loss_box_reg': tensor(nan, device='cuda:0', grad_fn=<DivBackward0>)}"
)
DEEPSPEED_SCALE = (
    "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
)
MEGATRON_NAN = (
    "AssertionError: Rank 11: found NaN in local grad norm in backward pass before data-parallel "
    "communication collective. Device: 3"
)
TORCHVISION_NAN = "Loss is nan, stopping training"
OPENNMT_NAN = "RuntimeError: Model diverged with loss = NaN."
FP16_SCALE_DOWN = "Found NaN, decreased lg_loss_scale to 19.0"
APEX_SCALE_ZERO = "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.0"
APEX_SCALE_DOWN = "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"
HEALTHY = "[rank0]: step 100 | loss 2.3456 | grad_norm 1.02 | lr 3.000e-04"


# --- helpers -----------------------------------------------------------------------------


def top(report: Report) -> Finding:
    assert report.hypotheses, report.gaps
    return report.hypotheses[0]


def names(line: str) -> dict[str, dict[str, object]]:
    return {sig.name: fields for sig, fields in matches(line)}


# --- signatures: every variant matches with its fields ----------------------------------


@pytest.mark.parametrize(
    ("line", "signature", "fields"),
    [
        (
            "args.py: error: unrecognized arguments: --local-rank=0 --epochs 3",
            "setup.unrecognized_arguments",
            {"launcher_flags": ["--local-rank"], "prog": "args.py"},
        ),
        (
            DEEPSPEED_UNDERSCORE.splitlines()[0],
            "setup.unrecognized_arguments",
            {"launcher_flags": ["--local_rank"]},
        ),
        (
            "args_req.py: error: the following arguments are required: --local_rank",
            "setup.required_arguments",
            {"launcher_flags": ["--local_rank"]},
        ),
        (HF_PARSER, "setup.hf_unused_arguments", {"launcher_flags": ["--local-rank"]}),
        (
            ENV_RANK.splitlines()[-1],
            "setup.rendezvous_env_missing",
            {"variable": "RANK", "method": "env"},
        ),
        (TCP_RANK_MISSING, "setup.rendezvous_env_missing", {"parameter": "rank parameter"}),
        ("KeyError: 'LOCAL_RANK'", "setup.env_key_error", {"variable": "LOCAL_RANK"}),
        ("KeyError: 'SLURM_PROCID'", "setup.env_key_error", {"variable": "SLURM_PROCID"}),
        (
            DUPLICATE_GPU.splitlines()[-1],
            "setup.duplicate_gpu",
            {"ranks": [0, 2], "bus_id": "4000"},
        ),
        (DUPLICATE_GPU_WARN, "setup.duplicate_gpu", {"rank": "2", "other_rank": "0"}),
        ("RuntimeError: CUDA error: invalid device ordinal", "setup.invalid_device_ordinal", {}),
        (
            "RuntimeError: cuda runtime error (101) : invalid device ordinal at /pytorch/torch/csrc/cuda/Module.cpp:59",
            "setup.invalid_device_ordinal",
            {},
        ),
        (
            "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
            "setup.devices_unavailable",
            {},
        ),
        (
            "RuntimeError: Mesh should not be bigger than default world size 2, but found 4 ranks!",
            "setup.mesh_too_big",
            {"world_size": "2", "mesh_size": "4"},
        ),
        (
            "RuntimeError: Mesh should not be bigger than default world size, but found 8 ranks!",
            "setup.mesh_too_big",
            {"mesh_size": "8"},
        ),
        (
            "ValueError: dp_shard * dp_replicate * cp * tp * pp (16) != world_size (8)",
            "setup.parallel_dims",
            {"world_size": "8"},
        ),
        (
            "ValueError: Expects the number of devices in the mesh (16) to equal the world size"
            " (8)",
            "setup.parallel_dims",
            {"mesh": "16", "world": "8"},
        ),
        (
            "RuntimeError: DeviceMesh must include every process in WORLD, but WORLD_SIZE(8) !="
            " mesh size(4), unless it is a submesh",
            "setup.parallel_dims",
            {"world_of_mesh": "8", "mesh_size": "4"},
        ),
        (
            "AssertionError: Checkpoint was saved with tensor_model_parallel_size=2 but is being"
            " loaded with tensor_model_parallel_size=4",
            "setup.checkpoint_saved_with",
            {"dim": "tensor_model_parallel_size", "saved": "2", "now": "4"},
        ),
        (
            "AssertionError: num_attention_heads (14) must be a multiple of"
            " tensor_model_parallel_size (4).",
            "setup.parallel_size_splits_model",
            {"what": "num_attention_heads (14)"},
        ),
        (SAMPLER_RANK, "setup.rank_out_of_range", {"bad_rank": "3", "max_rank": "1"}),
        (NEW_GROUP_RANK, "setup.rank_out_of_range", {"group_rank": "3", "world_size": "1"}),
        (MEGATRON_DIVISIBLE, "setup.world_not_divisible", {"by": "2"}),
        (VLLM_EQUAL, "setup.world_not_divisible", {}),
        (BARRIER_EXCESS, "setup.store_barrier", {"world_size": 2, "joined": 4, "excess": True}),
        (BARRIER_WAITING, "setup.store_barrier", {"excess": True}),
        (BARRIER_SHORT, "setup.store_barrier", {"excess": False}),
        (
            "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
            "setup.backend_unavailable",
            {},
        ),
        (NO_NCCL_BUILT, "setup.backend_unavailable", {"backend": "NCCL"}),
        (  # torch's own raise, as a traceback shows its source line (two string literals)
            """raise RuntimeError("Distributed package doesn't have NCCL " "built in")""",
            "setup.backend_unavailable",
            {"backend": "NCCL"},
        ),
        (NO_BACKEND_CPU.splitlines()[-1], "setup.no_backend_for_device", {"device": "cpu"}),
        (CUDA_DENSE, "setup.tensor_device", {}),
        (
            GLOO_REDUCE_SCATTER,
            "setup.backend_op_unsupported",
            {"group": "Gloo", "op": "reduce_scatter"},
        ),
        (
            NCCL_BASE,
            "setup.backend_op_unsupported",
            {"group": "nccl", "op": "_reduce_scatter_base"},
        ),
        (GLOO_PREMUL, "setup.reduce_op_unsupported", {"op": "PREMUL_SUM", "backend": "Gloo"}),
        (
            "RuntimeError: SMDDP does not support: ReduceOp",
            "setup.reduce_op_unsupported",
            {"vendor": "SMDDP"},
        ),
        (
            "Parameters which did not receive grad for rank 0: unused.bias, unused.weight",
            "ddp.unused_parameter_names",
            {"parameters": ["unused.bias", "unused.weight"], "rank": "0"},
        ),
        (
            "Parameter indices which did not receive grad for rank 1: 2 3",
            "ddp.unused_parameter_indices",
            {"indices": [2, 3]},
        ),
        (READY_TWICE[1], "ddp.marked_ready_twice", {"parameter": "layer.bias", "index": "1"}),
        (STATIC_GRAPH, "ddp.unfinished_reduction", {}),
        (LIGHTNING_UNUSED, "ddp.lightning_unused", {}),
        (ANOMALY.splitlines()[-1], "nan.anomaly", {"function": "SqrtBackward0", "value": "nan"}),
        (CLIP, "nan.nonfinite_grad_norm", {"order": "2.0"}),
        (DEEPSPEED_SCALE, "nan.loss_scale_floor", {}),
        (APEX_SCALE_ZERO, "nan.loss_scale_floor", {"below_one": "0.0"}),
        (MEGATRON_NAN, "nan.rank_check", {"rank": "11", "found": "NaN"}),
        (DETECTRON.splitlines()[0], "nan.floating_point_error", {}),
        (DETECTRON.splitlines()[1], "nan.loss_value", {"metric": "loss_cls", "value": "nan"}),
        (TORCHVISION_NAN, "nan.loss_value", {"metric": "Loss", "value": "nan"}),
        (OPENNMT_NAN, "nan.loss_value", {"value": "nan"}),
        (MULTINOMIAL, "nan.invalid_probabilities", {}),
        ("[bf16]  log_probs shape=(1, 127) n_nan=127/127", "nan.count", {"count": 127}),
        ("grad stats: nan_count: 3 inf_count: 0", "nan.count", {"count": 3}),
        ("check_tensor(logits) has_nan=True", "nan.count", {}),
    ],
)
def test_signature_variants(line: str, signature: str, fields: dict[str, object]) -> None:
    found = names(line)
    assert signature in found, found
    for key, value in fields.items():
        assert found[signature].get(key) == value, (key, found[signature])


@pytest.mark.parametrize(
    "line",
    [
        HEALTHY,
        FP16_SCALE_DOWN,
        APEX_SCALE_DOWN,
        FIND_UNUSED_WARNING,
        "| loss          | 0.185    |",
        "lr=inference",
        "probe name='inv_freq' dtype=torch.float32 shape=(64,) n_nan=0 first5=[1.0]",
        "grad stats: nan_count: 0 has_nan=False",
    ],
)
def test_healthy_lines_match_no_config_ddp_or_nan_signature(line: str) -> None:
    own = [n for n in names(line) if n.split(".")[0] in ("setup", "ddp", "nan")]
    assert own == []


# --- config.launcher_args ----------------------------------------------------------------


def test_launch_passing_dashed_local_rank(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": LAUNCH_HYPHEN}))
    assert verdict.cause_id == "config.launcher_args"
    assert verdict.confidence >= 0.9
    assert verdict.location is not None and verdict.location.file == "args.py"
    assert "--local-rank" in verdict.title and "--local_rank" in verdict.fix
    assert "torch.distributed.launch" in verdict.summary


def test_torchrun_not_passing_a_required_local_rank(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": TORCHRUN_REQUIRED}))
    assert verdict.cause_id == "config.launcher_args"
    assert "requires --local_rank" in verdict.title
    assert "LOCAL_RANK" in verdict.fix


def test_deepspeed_and_hf_parser_variants(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"a.log": DEEPSPEED_UNDERSCORE, "b.log": HF_PARSER}))
    assert verdict.cause_id == "config.launcher_args"
    assert verdict.confidence >= 0.9


def test_launcher_options_after_the_script_name(tmp_path: Path) -> None:
    text = (
        "usage: train.py [-h] [--local_rank LOCAL_RANK]\n"
        "train.py: error: unrecognized arguments: --nproc_per_node=4 --master_port=29501\n"
    )
    verdict = top(analyze_files(tmp_path, {"console.log": text}))
    assert verdict.cause_id == "config.launcher_args"
    assert "--master_port, --nproc_per_node" in verdict.title
    assert "before it" in verdict.fix


def test_script_option_typo_is_a_weaker_launcher_args(tmp_path: Path) -> None:
    text = (
        "usage: train.py [-h] [--local_rank LOCAL_RANK]\n"
        "train.py: error: unrecognized arguments: --lerning-rate 0.1\n"
    )
    verdict = hypothesis(analyze_files(tmp_path, {"console.log": text}), "config.launcher_args")
    assert 0.5 <= verdict.confidence < 0.7


def test_exit_code_2_alone_is_only_a_hint(tmp_path: Path) -> None:
    text = LAUNCH_HYPHEN.splitlines()[-1]
    verdict = hypothesis(analyze_files(tmp_path, {"console.log": text}), "config.launcher_args")
    assert verdict.confidence < 0.5
    assert "unrecognized arguments" in verdict.confirm


# --- config.env_missing ------------------------------------------------------------------


@pytest.mark.parametrize(("text", "variable"), [(ENV_RANK, "RANK"), (ENV_MASTER, "MASTER_ADDR")])
def test_env_rendezvous_without_launcher_variables(
    tmp_path: Path, text: str, variable: str
) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert verdict.cause_id == "config.env_missing"
    assert variable in verdict.title
    assert verdict.location is not None and verdict.location.file == "/workspace/train.py"
    assert verdict.location.line == 2


def test_script_reading_an_unset_local_rank(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": KEY_LOCAL_RANK}))
    assert verdict.cause_id == "config.env_missing"
    assert "LOCAL_RANK" in verdict.title and "torchrun" in verdict.fix


def _ccl(level: str, text: str) -> str:
    """A line as oneCCL's logger writes it: `|CCL_<LEVEL>| file.cpp:N function: message`."""
    return f"2025:03:02-10:11:12:(41207) |CCL_{level}| {text}"


_CCL_NO_LOCAL = _ccl(
    "WARN",
    "could not get local_idx/count from environment variables, trying to get them from ATL",
)


def test_oneccl_without_a_launcher_naming_local_ranks(tmp_path: Path) -> None:
    """oneCCL learns the local rank/count from its launcher's variables; without them it
    fails in getenv_local_coord (the failure names it: the strong reading)."""
    log = "\n".join(
        [
            _ccl("WARN", "did not find MPI-launcher specific variables, switch to ATL/OFI"),
            _CCL_NO_LOCAL,
            _ccl("ERROR", "global.cpp:150 getenv_local_coord: condition local_proc_idx failed"),
            "RuntimeError: oneCCL: global.cpp:150 getenv_local_coord: EXCEPTION",
        ]
    )
    verdict = top(analyze_files(tmp_path, {"rank0.log": log}))
    assert (verdict.cause_id, verdict.confidence) == ("config.env_missing", 0.7)
    assert "CCL_LOCAL_RANK" in verdict.fix and "CCL_PROCESS_LAUNCHER" in verdict.fix


def test_oneccls_local_rank_warning_alone_is_no_failure(tmp_path: Path) -> None:
    """The warning precedes a healthy start when the transport supplies the coordinates."""
    log = "\n".join([_CCL_NO_LOCAL, "step 1 loss 2.31", "step 2 loss 2.28"])
    report = analyze_files(tmp_path, {"rank0.log": log})
    assert "config.env_missing" not in [h.cause_id for h in report.hypotheses]


def test_oneccl_finding_no_libfabric_provider(tmp_path: Path) -> None:
    log = "\n".join(
        [
            _ccl("ERROR", "atl_ofi_helper.cpp:867 fi_getinfo error: ret -61, providers 0"),
            _ccl("ERROR", "atl_ofi.cpp:243 init: can't find suitable provider"),
            _ccl(
                "ERROR", "atl_ofi_comm.cpp:278 init_transport: condition transport->init() failed"
            ),
        ]
    )
    report = analyze_files(tmp_path, {"rank0.log": log})
    verdict = top(report)
    assert (verdict.cause_id, verdict.confidence) == ("config.env_missing", 0.45)
    assert "FI_PROVIDER_PATH" in verdict.fix and "--shm-size" in verdict.fix
    assert "comm.unknown" not in [h.cause_id for h in report.hypotheses]


def test_a_bare_oneccl_error_is_an_unexplained_comm_failure(tmp_path: Path) -> None:
    log = _ccl("ERROR", "ze_handle_exchange.cpp:312 recv_fd: unexpected error in recvmsg")
    verdict = top(analyze_files(tmp_path, {"rank0.log": log}))
    assert verdict.cause_id == "comm.unknown"


# --- config.device_assignment ------------------------------------------------------------


def test_duplicate_gpu_names_both_ranks(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": DUPLICATE_GPU}))
    assert verdict.cause_id == "config.device_assignment"
    assert verdict.ranks == [0, 2]
    assert verdict.confidence >= 0.9
    assert "set_device" in verdict.fix


def test_duplicate_gpu_warn_under_mpirun(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"mpi.log": DUPLICATE_GPU_WARN}))
    assert verdict.cause_id == "config.device_assignment"
    assert verdict.ranks == [0, 2]


def test_invalid_ordinal_in_set_device_points_at_the_call(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": INVALID_ORDINAL}))
    assert verdict.cause_id == "config.device_assignment"
    assert verdict.confidence >= 0.85
    assert verdict.location is not None and (verdict.location.file, verdict.location.line) == (
        "train.py",
        107,
    )
    assert "nproc-per-node" in verdict.fix


def test_devices_busy_is_a_moderate_device_assignment(tmp_path: Path) -> None:
    verdict = hypothesis(analyze_files(tmp_path, {"train.log": BUSY}), "config.device_assignment")
    assert 0.5 <= verdict.confidence < 0.8


def test_bare_nccl_invalid_usage_suggests_a_shared_gpu(tmp_path: Path) -> None:
    text = "RuntimeError: NCCL error, invalid usage, NCCL version 2.7.8"
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert verdict.cause_id == "config.device_assignment"
    assert verdict.confidence == 0.5
    assert "two ranks on one GPU" in verdict.confirm


def test_nccl_init_lines_with_two_processes_on_one_bus(tmp_path: Path) -> None:
    text = nccl_init("node1", 4100, 0, "18000") + nccl_init("node1", 4101, 1, "18000")
    verdict = hypothesis(analyze_files(tmp_path, {"nccl.log": text}), "config.device_assignment")
    assert verdict.ranks == [0, 1] and "18000" in verdict.title


def test_same_bus_on_different_hosts_is_fine(tmp_path: Path) -> None:
    text = nccl_init("node1", 4100, 0, "18000") + nccl_init("node2", 4100, 1, "18000")
    report = analyze_files(tmp_path, {"nccl.log": text})
    assert "config.device_assignment" not in [h.cause_id for h in report.hypotheses]


def test_a_collective_on_a_tensor_off_the_groups_device(tmp_path: Path) -> None:
    """torch >= 2.6 binds the group to a device; a tensor elsewhere (no set_device) fails."""
    log = "\n".join(
        [
            '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/tensor/_api.py",'
            " line 792, in distribute_tensor",
            "    local_tensor = mesh_broadcast(local_tensor, device_mesh, mesh_dim=idx)",
            "torch.distributed.DistBackendError: Attempt to perform collective on tensor not on"
            " device passed to init_process_group",
        ]
    )
    verdict = top(analyze_files(tmp_path, {"rank1.log": log}))
    assert (verdict.cause_id, verdict.confidence) == ("config.device_assignment", 0.75)
    assert "set_device(local_rank)" in verdict.fix and "device_id=" in verdict.fix


# --- config.world_size_mismatch ----------------------------------------------------------


def test_two_layers_counting_different_worlds(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "pretrain_bert.py", line 112, in <module>',
            "    initialize_distributed(args)",
            "AssertionError: MPI world size 16 does not match torch world size 8",
        ]
    )
    verdict = top(analyze_files(tmp_path, {"rank0.log": log}))
    assert (verdict.cause_id, verdict.confidence) == ("config.world_size_mismatch", 0.75)


_PAST_THE_DEVICES = [
    "Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.9/site-packages/pytorch_lightning/strategies/ddp.py",'
    " line 118, in root_device",
    "    return self.parallel_devices[self.local_rank]",
]


def test_an_index_error_at_the_local_rank_means_more_processes_than_the_list(
    tmp_path: Path,
) -> None:
    """Uneven GPUs per node: the node's device list is shorter than its local ranks."""
    log = "\n".join([*_PAST_THE_DEVICES, "IndexError: list index out of range"])
    verdict = top(analyze_files(tmp_path, {"rank6.log": log}))
    assert (verdict.cause_id, verdict.confidence) == ("config.world_size_mismatch", 0.4)
    assert "same number of GPUs on every node" in verdict.fix


def test_another_error_at_the_local_rank_is_not_read_as_the_world(tmp_path: Path) -> None:
    log = "\n".join([*_PAST_THE_DEVICES, "KeyError: 'cuda:7'"])
    report = analyze_files(tmp_path, {"rank6.log": log})
    assert "config.world_size_mismatch" not in [h.cause_id for h in report.hypotheses]


def test_mesh_larger_than_the_world(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": MESH_TOO_BIG}))
    assert verdict.cause_id == "config.world_size_mismatch"
    assert verdict.ranks == [0, 1]
    assert verdict.location is not None and verdict.location.line == 4


def test_a_checkpoint_sharded_for_another_model_parallel_size(tmp_path: Path) -> None:
    text = (
        '  File "/work/llama/llama/generation.py", line 103, in build\n'
        "    assert model_parallel_size == len(\n"
        "AssertionError: Loading a checkpoint for MP=1 but world size is 4\n"
    )
    verdict = top(analyze_files(tmp_path, {"rank2.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.world_size_mismatch", 0.8)
    assert "(1 saved, 4 now)" in verdict.title and "consolidated" in verdict.fix


def test_a_checkpoint_saved_at_another_tensor_parallel_size(tmp_path: Path) -> None:
    text = (
        "AssertionError: Checkpoint was saved with tensor_model_parallel_size=2 but is being"
        " loaded with tensor_model_parallel_size=4\n"
    )
    verdict = top(analyze_files(tmp_path, {"rank0.log": text}))
    assert verdict.cause_id == "config.world_size_mismatch" and "(2 saved, 4 now)" in verdict.title


@pytest.mark.parametrize(
    "text",
    [
        SAMPLER_RANK,
        NEW_GROUP_RANK,
        MEGATRON_DIVISIBLE,
        VLLM_EQUAL,
        "ValueError: dp_shard * dp_replicate * cp * tp * pp (16) != world_size (8)",
        "ValueError: Expects the number of devices in the mesh (16) to equal the world size (8)",
        "RuntimeError: DeviceMesh must include every process in WORLD, but WORLD_SIZE(8) !="
        " mesh size(4), unless it is a submesh",
        "AssertionError: num_attention_heads (14) must be a multiple of"
        " tensor_model_parallel_size (4).",
    ],
)
def test_rank_and_size_checks(tmp_path: Path, text: str) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert verdict.cause_id == "config.world_size_mismatch"
    assert verdict.confidence >= 0.8


# vLLM's ModelConfig check, Megatron-style argument checks, ColossalAI's shardformer policy
VLLM_HEADS = (
    "ValueError: Total number of attention heads (52) must be divisible by tensor parallel "
    "size (8)."
)
VLLM_LAYERS = (
    "ValueError: Total number of hidden layers (61) must be divisible by pipeline parallel "
    "size (4)."
)
MEGATRON_HEADS = (
    "AssertionError: num_attention_heads must be divisible by tensor_model_parallel_size"
)
SHARDFORMER_HEADS = (
    "AssertionError: The number of attention heads must be divisible by tensor parallel size."
)


@pytest.mark.parametrize(
    ("text", "split"),
    [
        (VLLM_HEADS, "tensor parallel size (8) does not divide the number of attention heads (52)"),
        (VLLM_LAYERS, "pipeline parallel size (4) does not divide the number of hidden layers"),
        (MEGATRON_HEADS, "tensor_model_parallel_size does not divide the num_attention_heads"),
        (SHARDFORMER_HEADS, "tensor parallel size does not divide the number of attention heads"),
    ],
)
def test_a_parallel_size_that_does_not_divide_the_model(
    tmp_path: Path, text: str, split: str
) -> None:
    verdict = top(analyze_files(tmp_path, {"serve.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.world_size_mismatch", 0.8)
    assert split in verdict.title and "divides the attention" in verdict.fix


@pytest.mark.parametrize(
    "text",
    [
        "ValueError: batch size must be divisible by the number of GPUs",
        "AssertionError: Sequence length 4097 must be divisible by tensor parallel size 8",
        "hidden size 4096, 32 attention heads, tensor parallel size 8",
    ],
)
def test_other_divisibility_is_not_a_model_split(text: str) -> None:
    assert "setup.parallel_size_splits_model" not in names(text)


@pytest.mark.parametrize(
    ("text", "confidence", "said"),
    [
        (
            "AssertionError: Check batch related parameters. train_batch_size is not equal to"
            " micro_batch_per_gpu * gradient_acc_step * world_size 16 != 4 * 1 * 1",
            0.75,
            "it fits 4 GPUs, this launch has 1",
        ),
        (
            "AssertionError: Check batch related parameters. train_batch_size is not equal to"
            " micro_batch_per_gpu * gradient_acc_step * world_size250 != 4 * 8 * 7",
            0.55,
            "it fits no whole number of GPUs, this launch has 7",
        ),
        (
            "ValueError: Please correct the following DeepSpeed config values that mismatch"
            " TrainingArguments values:\n- ds train_batch_size=32 vs hf train_batch_size"
            " (calculated)=4\n",
            0.75,
            "the trainer computes 4 for this launch",
        ),
    ],
)
def test_a_deepspeed_batch_written_for_another_world(
    tmp_path: Path, text: str, confidence: float, said: str
) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.world_size_mismatch", confidence)
    assert said in verdict.title and '"auto"' in verdict.fix


def _load_error(saved: tuple[int, int], model: tuple[int, int]) -> str:
    """What load_state_dict raises for a checkpoint of one Linear's shape into another."""
    import torch

    checkpoint = torch.nn.Linear(saved[1], saved[0]).state_dict()
    try:
        torch.nn.Linear(model[1], model[0]).load_state_dict(checkpoint)
    except RuntimeError as exc:
        return f"RuntimeError: {exc}\n"
    raise AssertionError("the shapes matched")


@requires_torch
def test_a_tensor_parallel_shard_loaded_into_a_whole_model(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"load.log": _load_error((2, 8), (8, 8))}))
    assert verdict.cause_id == "config.world_size_mismatch"
    assert "the checkpoint holds 1/4 of each tensor" in verdict.title
    whole = top(analyze_files(tmp_path, {"load.log": _load_error((8, 8), (8, 2))}))
    assert "the model holds 1/4 of each checkpoint tensor" in whole.title


@requires_torch
def test_a_checkpoint_of_another_model_size_is_no_shard(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"load.log": _load_error((12, 12), (8, 8))})
    assert all(h.cause_id != "config.world_size_mismatch" for h in report.hypotheses)


def test_the_deepspeed_runner_ignoring_visible_devices(tmp_path: Path) -> None:
    text = (
        "[2023-08-10 09:12:01,532] [WARNING] [runner.py:196:fetch_hostfile] Unable to find"
        " hostfile, will proceed with training with local resources only.\n"
        "Detected CUDA_VISIBLE_DEVICES=2,4,5,7 but ignoring it because one or several of"
        " --include/--exclude/--num_gpus/--num_nodes cl args were used. If you want to use"
        " CUDA_VISIBLE_DEVICES don't pass any of these arguments to deepspeed.\n"
    )
    verdict = top(analyze_files(tmp_path, {"launch.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.device_assignment", 0.75)
    assert "--include localhost:2,4,5,7" in verdict.fix


_GUESSED = (
    "[rank{r}]:[W305 10:02:11.153232081 ProcessGroupNCCL.cpp:4715] [PG ID 0 PG GUID 0 Rank {r}]"
    "  using GPU {r} {barrier}as device{s} used by this process {v} currently unknown. This can"
    " potentially cause a hang if this rank to GPU mapping is incorrect.\n"
)


@pytest.mark.parametrize("barrier", [False, True])
def test_a_guessed_gpu_is_a_weak_device_assignment(tmp_path: Path, barrier: bool) -> None:
    """torch's own warning that it guessed the GPU: a weak reading when nothing else shows."""
    words = (
        {"barrier": "to perform barrier ", "s": "s", "v": "are"}
        if barrier
        else {"barrier": "", "s": "", "v": "is"}
    )
    text = "".join(_GUESSED.format(r=r, **words) for r in range(4))
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.device_assignment", 0.3)
    assert "device_id=" in verdict.fix


def test_a_guessed_gpu_yields_to_a_named_failure(tmp_path: Path) -> None:
    words = {"barrier": "", "s": "", "v": "is"}
    text = _GUESSED.format(r=0, **words) + (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a"
        " total capacity of 79.15 GiB of which 3.06 MiB is free.\n"
    )
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert verdict.cause_id.startswith("oom.")


def test_more_workers_than_world_blames_a_shared_port(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": BARRIER_EXCESS}))
    assert verdict.cause_id == "config.world_size_mismatch"
    assert "4 processes joined a world of 2" in verdict.title
    assert "MASTER_PORT" in verdict.fix


def test_fewer_workers_than_world_is_only_a_hint(tmp_path: Path) -> None:
    verdict = hypothesis(
        analyze_files(tmp_path, {"train.log": BARRIER_SHORT}), "config.world_size_mismatch"
    )
    assert verdict.confidence < 0.5


# --- config.backend_device ---------------------------------------------------------------


def test_cpu_tensor_on_a_cuda_only_group(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": NO_BACKEND_CPU}))
    assert verdict.cause_id == "config.backend_device"
    assert verdict.ranks == [0]
    assert verdict.location is not None and verdict.location.line == 3
    assert "cpu:gloo,cuda:nccl" in verdict.fix


def test_nccl_without_a_gpu(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": NCCL_NO_GPU}))
    assert verdict.cause_id == "config.backend_device"
    assert "gloo" in verdict.fix


@pytest.mark.parametrize(
    ("text", "op"),
    [(GLOO_REDUCE_SCATTER, "reduce_scatter"), (NCCL_GATHER, "gather"), (GLOO_PREMUL, "PREMUL_SUM")],
)
def test_ops_a_backend_lacks(tmp_path: Path, text: str, op: str) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert verdict.cause_id == "config.backend_device"
    assert op in verdict.title


# --- wrong.unused_parameters -------------------------------------------------------------


def test_ddp_unused_parameters_named_per_rank(tmp_path: Path) -> None:
    text = ddp_unused(0, "unused.bias, unused.weight", "2 3") + ddp_unused(
        1, "unused.bias, unused.weight", "2 3"
    )
    verdict = top(analyze_files(tmp_path, {"console.log": text}))
    assert verdict.cause_id == "wrong.unused_parameters"
    assert verdict.ranks == [0, 1]
    assert "unused.bias, unused.weight on ranks 0-1" in verdict.summary
    assert verdict.location is not None and verdict.location.line == 15
    assert "find_unused_parameters=True" in verdict.fix


def test_only_the_ranks_that_skip_a_branch_are_culprits(tmp_path: Path) -> None:
    files = {
        "rank0.log": ddp_unused(0, "head.aux.weight", "7"),
        "rank1.log": traceback(1, DDP_FRAMES, REDUCTION),
    }
    verdict = top(analyze_files(tmp_path, files))
    assert verdict.cause_id == "wrong.unused_parameters"
    assert verdict.ranks == [0]
    assert "head.aux.weight on rank 0" in verdict.summary


def test_without_debug_names_the_indices_and_asks_for_names(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": ddp_unused(0, None, "2 3")}))
    assert verdict.cause_id == "wrong.unused_parameters"
    assert "#2, #3" in verdict.summary


def test_reentrant_checkpoint_marks_ready_twice(tmp_path: Path) -> None:
    text = "".join(f"[rank{r}]: {line}\n" for r in (0, 1) for line in READY_TWICE)
    verdict = top(analyze_files(tmp_path, {"console.log": text}))
    assert verdict.cause_id == "config.ddp_reducer"  # the reducer, not an unused parameter
    assert "layer.bias" in verdict.summary and "use_reentrant=False" in verdict.fix


def test_static_graph_change(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": f"[rank0]: {STATIC_GRAPH}"}))
    assert verdict.cause_id == "wrong.unused_parameters"
    assert "static_graph" in verdict.fix


def test_lightning_unused_parameters(tmp_path: Path) -> None:
    assert (
        top(analyze_files(tmp_path, {"fit.log": LIGHTNING_UNUSED})).cause_id
        == "wrong.unused_parameters"
    )


def test_find_unused_performance_warning_is_not_a_failure(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"train.log": FIND_UNUSED_WARNING + "\n" + HEALTHY})
    assert "wrong.unused_parameters" not in [h.cause_id for h in report.hypotheses]


# --- wrong.nan ---------------------------------------------------------------------------


def test_anomaly_mode_names_the_op_and_the_line(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": ANOMALY}))
    assert verdict.cause_id == "wrong.nan"
    assert "SqrtBackward0" in verdict.title
    assert verdict.location is not None and verdict.location.line == 5


@pytest.mark.parametrize(
    "text",
    [CLIP, DETECTRON, DEEPSPEED_SCALE, APEX_SCALE_ZERO, MEGATRON_NAN, TORCHVISION_NAN, OPENNMT_NAN],
)
def test_nan_variants(tmp_path: Path, text: str) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": text}))
    assert verdict.cause_id == "wrong.nan"
    assert verdict.confidence >= 0.7


def test_nan_on_one_rank_first_names_that_rank(tmp_path: Path) -> None:
    lines = [HEALTHY.replace("rank0", f"rank{r}") for r in range(4)] * 3
    lines += ["[rank3]: step 130 | loss nan | grad_norm nan | lr 3.000e-04"]
    lines += [HEALTHY.replace("rank0", f"rank{r}") for r in range(3)] * 10
    lines += [f"[rank{r}]: step 131 | loss: nan" for r in range(4)]
    verdict = top(analyze_files(tmp_path, {"console.log": "\n".join(lines)}))
    assert verdict.cause_id == "wrong.nan"
    assert verdict.ranks == [3]
    assert "First seen on rank 3" in verdict.summary


def test_megatron_check_names_its_rank(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"train.log": MEGATRON_NAN}))
    assert verdict.ranks == [11]


def test_fp16_scaler_backing_off_and_healthy_losses_are_not_nan(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"train.log": f"{HEALTHY}\n{FP16_SCALE_DOWN}\n{HEALTHY}"})
    assert "wrong.nan" not in [h.cause_id for h in report.hypotheses]


# --- the config playbook -----------------------------------------------------------------


def test_config_playbook_runs_config_rules_only_on_logs(tmp_path: Path) -> None:
    report = analyze_files(
        tmp_path, {"console.log": LAUNCH_HYPHEN + MESH_TOO_BIG}, symptom="config"
    )
    assert report.playbook == "config"
    causes = [h.cause_id for h in report.hypotheses]
    assert causes[:2] == ["config.launcher_args", "config.world_size_mismatch"]
    assert [r.tool for r in report.tool_runs] == ["collect_files", "scan_logs"]


@pytest.mark.parametrize(
    ("message", "setup"),
    [
        ("KeyError: 'RANK'", True),
        ("ValueError: Error initializing torch.distributed using env:// rendezvous: environment"
         " variable MASTER_ADDR expected, but not set", True),
        ("RuntimeError: CUDA error: invalid device ordinal", True),
        ("ValueError: bad batch on rank 1", False),
        ("AssertionError: the rank's loss went up", False),
    ],
)  # fmt: skip
def test_config_markers_read_variable_names_in_capitals_only(message: str, setup: bool) -> None:
    """'rank' is a word of many ordinary messages; only RANK names the launcher's variable."""
    assert bool(config_markers._SETUP.search(message)) is setup


USAGE = """\
usage: train.py [-h] [--cfg CFG] [--data DATA] [--epochs EPOCHS]
                [--batch-size BATCH_SIZE] [--sync-bn]
                [--local-rank LOCAL_RANK] [--logdir LOGDIR]
"""


def test_a_usage_block_cut_before_its_error_names_the_local_rank_option(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": USAGE}))
    assert (verdict.cause_id, verdict.confidence) == ("config.launcher_args", 0.6)
    assert "--local-rank" in verdict.summary and "--local_rank" in verdict.fix
    assert verdict.location is not None and verdict.location.file == "train.py"


def test_a_usage_block_alone_is_a_weaker_launch_error(tmp_path: Path) -> None:
    text = USAGE.replace("                [--local-rank LOCAL_RANK] [--logdir LOGDIR]\n", "")
    verdict = top(analyze_files(tmp_path, {"console.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.launcher_args", 0.4)


@pytest.mark.parametrize("line", ["GPU memory usage: 3.2 GB", "  cpu usage: 12%, disk usage: 3%"])
def test_resource_usage_lines_are_no_argparse_usage(tmp_path: Path, line: str) -> None:
    assert "setup.usage_printed" not in names(line)


@pytest.mark.parametrize(
    "line",
    [
        "cmd = pdsh -S -f 1024 -w node-0,node-1 cd /; python -u -m deepspeed.launcher.launch"
        " --node_rank=%n --master_addr= --master_port=29500 train.py",
        "[INFO] [runner.py:417:main] Using IP address of  for node node-0.svc.cluster.local",
        "+ MASTER_ADDR= MASTER_PORT=29500 torchrun --nnodes 2 train.py",
    ],
)
def test_an_empty_rendezvous_address_in_the_launch(tmp_path: Path, line: str) -> None:
    top = analyze_files(tmp_path, {"launcher.log": f"{line}\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.env_missing", 0.7)
    assert "--master_addr IP" in top.fix


@pytest.mark.parametrize(
    "line",
    [
        "torchrun --master_addr=10.0.0.1 --master_port=29500 train.py",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_NODELIST" | head -n 1)',
        "MASTER_ADDR=node-0 MASTER_PORT=29500",
    ],
)
def test_a_rendezvous_address_that_is_set_is_no_finding(tmp_path: Path, line: str) -> None:
    report = analyze_files(tmp_path, {"launcher.log": f"{line}\n"})
    assert all(h.cause_id != "config.env_missing" for h in report.hypotheses)


def test_a_vector_twice_the_size_alone_is_no_shard(tmp_path: Path) -> None:
    text = (
        "RuntimeError: Error(s) in loading state_dict for Embedding:\n"
        "\tsize mismatch for bias: copying a param with shape torch.Size([32000]) from"
        " checkpoint, the shape in current model is torch.Size([64000]).\n"
    )
    report = analyze_files(tmp_path, {"load.log": text})
    assert all(h.cause_id != "config.world_size_mismatch" for h in report.hypotheses)


# --- a model attribute read through the DDP wrapper (huggingface/diffusers#2044) --------

WRAPPED_UNET = """\
Traceback (most recent call last):
  File "train_dreambooth.py", line 701, in main
    if unet.dtype != torch.float32:
  File "/usr/lib/python3.8/site-packages/torch/nn/modules/module.py", line 1269, in __getattr__
    raise AttributeError("'{}' object has no attribute '{}'".format(
AttributeError: '{wrapper}' object has no attribute 'dtype'
"""


@pytest.mark.parametrize("wrapper", ["DistributedDataParallel", "DataParallel"])
def test_an_attribute_read_through_the_wrapper(tmp_path: Path, wrapper: str) -> None:
    text = WRAPPED_UNET.replace("{wrapper}", wrapper)
    verdict = top(analyze_files(tmp_path, {"rank0.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.unknown", 0.7)
    assert "model.module.dtype" in verdict.fix and wrapper in verdict.title
    assert verdict.location is not None and verdict.location.line == 701


@pytest.mark.parametrize("owner", ["FullyShardedDataParallel", "Linear", "UNet2DConditionModel"])
def test_an_attribute_missing_on_the_model_itself_is_no_wrapper(tmp_path: Path, owner: str) -> None:
    """FSDP forwards attribute reads to the module it wraps: a missing one is the model's."""
    text = WRAPPED_UNET.replace("{wrapper}", owner)
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert all("wrapper" not in h.title for h in report.hypotheses)


# --- more pipeline ranks than stages (pytorch/PiPPy#1137) --------------------------------


def test_a_pipeline_group_larger_than_its_stages(tmp_path: Path) -> None:
    line = "RuntimeError: Pipeline group size 4 cannot be larger than number of stages 1\n"
    verdict = top(analyze_files(tmp_path, {"rank0.log": line}))
    assert (verdict.cause_id, verdict.confidence) == ("config.world_size_mismatch", 0.75)
    assert "4 ranks" in verdict.title and "1 stage" in verdict.title
    assert "split_spec" in verdict.fix


# --- c10's device index check on XPU and other backends (saforem2/ezpz#187) --------------


def test_a_device_index_past_the_backends_devices(tmp_path: Path) -> None:
    line = "RuntimeError: The device index is out of range. It must be in [0, 6), but got 11.\n"
    verdict = top(analyze_files(tmp_path, {"rank23.log": line}))
    assert verdict.cause_id == "config.device_assignment"
    assert "device 11; it sees 6" in verdict.title


def test_a_custom_kernels_contiguity_check_is_no_collective(tmp_path: Path) -> None:
    """Triton ops and extensions raise c10d's words about their own inputs."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "kern.py", line 5, in softcap\n'
        '    assert x.is_contiguous(), "Tensors must be contiguous"\n'
        "AssertionError: Tensors must be contiguous\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert "config.backend_device" not in [h.cause_id for h in report.hypotheses]


# torchrun --nproc-per-node 1 on a script that reads model.module of a bare nn.Linear (torch
# 2.14.1 on the CPU here; paths shortened to /workspace)
BARE_MODULE = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 13, in <module>
[rank0]:     print(model.module.weight)
[rank0]:           ^^^^^^^^^^^^
[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1972, in __getattr__
[rank0]:     raise AttributeError(
[rank0]: AttributeError: 'Linear' object has no attribute 'module'. Did you mean: 'modules'?
E1127 04:29:07.128000 11144 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 11150) of binary: /opt/venv/bin/python3.11
"""


def test_module_read_from_a_model_no_wrapper_holds(tmp_path: Path) -> None:
    verdict = top(analyze_files(tmp_path, {"rank0.log": BARE_MODULE}))
    assert (verdict.cause_id, verdict.confidence) == ("config.unknown", 0.6)
    assert "getattr(model, 'module', model)" in verdict.fix and verdict.ranks == [0]
    assert verdict.location is not None and verdict.location.line == 13


# A collective's buffers sized for another world: gloo's words captured from torchrun
# --nproc-per-node 1 runs of torch 2.14.1 on the CPU here (the last frame and the error
# line of each traceback); ProcessGroupNCCL's are recorded in tests/fixtures/gpu.
BUFFER_SIZES = {
    "all_gather_into_tensor": (
        "distributed_c10d.py",
        5161,
        "all_gather_single",
        "RuntimeError: ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (4),"
        " got (5))",
    ),
    "reduce_scatter_tensor": (
        "distributed_c10d.py",
        5916,
        "reduce_scatter_single",
        "RuntimeError: [rank0]:[F1127 04:33:41.669020193 ProcessGroupGloo.cpp:1583] Check"
        " failed: outputShape[0] * worldSize == inputShape[0] (3 vs. 4). ",
    ),
    "all_to_all_single": (
        "distributed_c10d.py",
        6122,
        "all_to_all_single",
        "RuntimeError: Split sizes doesn't match total dim 0 size",
    ),
    "all_gather": (
        "distributed_c10d.py",
        5046,
        "all_gather",
        "RuntimeError: ProcessGroupGloo::allgather: invalid output tensor list at index 0"
        " (expected length 1, got 2)",
    ),
}


@pytest.mark.parametrize("name", sorted(BUFFER_SIZES))
def test_a_collectives_buffers_sized_for_another_world(tmp_path: Path, name: str) -> None:
    file, line, function, error = BUFFER_SIZES[name]
    text = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/workspace/train.py", line 9, in <module>\n'
        "[rank0]:     gather(out, part)\n"
        f'[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/{file}",'
        f" line {line}, in {function}\n"
        "[rank0]:     work = group.op(out, part)\n"
        f"[rank0]: {error}\n"
    )
    verdict = top(analyze_files(tmp_path, {"rank0.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.world_size_mismatch", 0.55)
    assert "dist.get_world_size(group)" in verdict.fix
    assert verdict.location is not None and verdict.location.line == 9


# bmaltais/kohya_ss#1687 (gradient checkpointing inside a compiled DDP module), and the c10d
# reducer's refusal of compiled autograd (torch/csrc/distributed/c10d/reducer.cpp)
COMPILED_DDP = (
    "torch._dynamo.exc.BackendCompilerFailed: backend='compile_fn' raised:\n"
    "NotImplementedError: DDPOptimizer backend: Found a higher order op in the graph. This is"
    " not supported. Please turn off DDP optimizer using torch._dynamo.config.optimize_ddp=False."
    " Note that this can cause performance degradation because there will be one bucket for the"
    " entire Dynamo graph. Please refer to this issue -"
    " https://github.com/pytorch/pytorch/issues/104674.\n"
)
COMPILED_AUTOGRAD = (
    "RuntimeError: Compiled autograd is not compatible with C++ DDP Reducer, please use"
    ' torch._dynamo.config.optimize_ddp="python_reducer".\n'
)


@pytest.mark.parametrize("text", [COMPILED_DDP, COMPILED_AUTOGRAD])
def test_torch_compile_against_ddps_reducer(tmp_path: Path, text: str) -> None:
    verdict = top(analyze_files(tmp_path, {"console.log": text}))
    assert (verdict.cause_id, verdict.confidence) == ("config.ddp_reducer", 0.75)
    assert "optimize_ddp" in verdict.fix
