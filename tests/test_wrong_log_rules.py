"""Log rules for wrong results: nondeterministic kernels and distributed evaluation, on the
messages torch, Lightning and accelerate print (old and new wordings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files, hypothesis, requires_torch

_ALERT = (
    "{op} does not have a deterministic implementation, but you set "
    "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this "
    "operation, or you can use the 'warn_only=True' option, if that's acceptable for your "
    "application. You can also file an issue at https://github.com/pytorch/pytorch/issues to "
    "help us prioritize adding deterministic support for this operation."
)
_ALERT_WARN = (
    "{op} does not have a deterministic implementation, but you set "
    "'torch.use_deterministic_algorithms(True, warn_only=True)'. You can file an issue at "
    "https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic "
    "support for this operation."
)
_ALERT_1_7 = (
    "index_add_cuda_ does not have a deterministic implementation, but you set "
    "'torch.set_deterministic(True)'. You can turn off determinism just for this operation "
    "if that's acceptable for your application. You can also file an issue at "
    "https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic "
    "support for this operation."
)
_CUBLAS = (
    "Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` "
    "or `at::Context::setDeterministicAlgorithms(true)`, but this operation is not "
    "deterministic because it uses CuBLAS and you have CUDA >= 10.2. To enable deterministic "
    "behavior in this case, you must set an environment variable before running your PyTorch "
    "application: CUBLAS_WORKSPACE_CONFIG=:4096:8 or CUBLAS_WORKSPACE_CONFIG=:16:8. For more "
    "information, go to {url}"
)
_SAMPLER = (
    "Using `DistributedSampler` with the dataloaders. During `trainer.{stage}()`, it is "
    "recommended to use `Trainer({args})` to ensure each sample/batch gets evaluated exactly "
    "once. Otherwise, multi-device settings use `DistributedSampler` that replicates some "
    "samples to make sure all devices have same batch size in case of uneven inputs."
)
_SYNC = (
    "It is recommended to use `self.log('{metric}', ..., sync_dist=True)` when logging on "
    "epoch level in distributed setting to accumulate the metric across devices."
)
_LIB = "/opt/conda/lib/python3.10/site-packages"


def _traceback(message: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 57, in <module>\n'
        "    loss.backward()\n"
        f'  File "{_LIB}/torch/_tensor.py", line 522, in backward\n'
        "    torch.autograd.backward(\n"
        f'  File "{_LIB}/torch/autograd/__init__.py", line 266, in backward\n'
        "    Variable._execution_engine.run_backward(  # Calls into the C++ engine\n"
        f"RuntimeError: {message}\n"
    )


def test_alert_error_names_op_and_user_line(tmp_path: Path) -> None:
    log = _traceback(_ALERT.format(op="scatter_add_cuda_kernel"))
    report = analyze_files(tmp_path, {"train.log": log})
    assert report.hypotheses[0].cause_id == "wrong.nondeterminism"
    found = report.hypotheses[0]
    assert "scatter_add_cuda_kernel" in found.title
    assert found.location is not None and found.location.file.endswith("train.py")
    assert found.location.line == 57
    assert "CUBLAS_WORKSPACE_CONFIG" in found.fix and found.confirm


def test_old_set_deterministic_wording(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"train.log": _traceback(_ALERT_1_7)})
    found = hypothesis(report, "wrong.nondeterminism")
    assert "index_add_cuda_" in found.title


@pytest.mark.parametrize(
    "line",
    [
        f"[rank1]:{_LIB}/torch/nn/functional.py:4070: UserWarning: "
        + _ALERT_WARN.format(op="upsample_bilinear2d_backward_out_cuda")
        + " (Triggered internally at ../aten/src/ATen/Context.cpp:83.)",
        "[rank1]:[W Context.cpp:82] Warning: "
        + _ALERT_WARN.format(op="upsample_bilinear2d_backward_out_cuda")
        + " (function alertNotDeterministic)",
    ],
)
def test_warn_only_alert_runs_on(tmp_path: Path, line: str) -> None:
    report = analyze_files(tmp_path, {"train.log": "epoch 0 loss 2.31\n" + line})
    found = hypothesis(report, "wrong.nondeterminism")
    assert report.hypotheses[0].cause_id == "wrong.nondeterminism"
    assert found.ranks == [1]
    assert found.confidence == pytest.approx(0.7)
    assert "warn_only" in found.summary


@pytest.mark.parametrize(
    "url",
    [
        "https://docs.nvidia.com/cuda/cublas/index.html#cublasApi_reproducibility",
        "https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility",
    ],
)
def test_cublas_workspace_error(tmp_path: Path, url: str) -> None:
    report = analyze_files(tmp_path, {"rank0.log": _traceback(_CUBLAS.format(url=url))})
    found = hypothesis(report, "wrong.nondeterminism")
    assert report.hypotheses[0].cause_id == "wrong.nondeterminism"
    assert "cuBLAS" in found.title
    assert found.confidence == pytest.approx(0.65)


def test_cublas_warning_points_at_calling_line(tmp_path: Path) -> None:
    line = (
        "/workspace/model/attention.py:296: UserWarning: "
        + _CUBLAS.format(
            url="https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility"
        )
        + " (Triggered internally at /pytorch/aten/src/ATen/Context.cpp:233.)"
    )
    report = analyze_files(tmp_path, {"train.log": line}, symptom="wrong")
    found = hypothesis(report, "wrong.nondeterminism")
    assert found.location is not None
    assert (found.location.file, found.location.line) == ("/workspace/model/attention.py", 296)


def test_determinism_words_alone_do_not_fire(tmp_path: Path) -> None:
    log = (
        "Seed set to 42\n"
        "torch.backends.cudnn.deterministic = True, benchmark = False\n"
        "GPU available: True (cuda), used: True\n"
        "`Trainer(deterministic=True)` set; results may still not be deterministic\n"
        "Epoch 3: val_loss=0.412 evaluated once per epoch\n"
    )
    report = analyze_files(tmp_path, {"train.log": log})
    causes = {h.cause_id for h in report.hypotheses}
    assert "wrong.nondeterminism" not in causes
    assert "wrong.eval_sharding" not in causes


@pytest.mark.parametrize(
    ("stage", "args"),
    [("test", "devices=1, num_nodes=1"), ("validate", "devices=1")],
)
def test_lightning_distributed_sampler_warning(tmp_path: Path, stage: str, args: str) -> None:
    line = (
        f"{_LIB}/pytorch_lightning/trainer/connectors/data_connector.py:215: "
        f"PossibleUserWarning: {_SAMPLER.format(stage=stage, args=args)}"
    )
    report = analyze_files(tmp_path, {"train.log": line}, symptom="wrong")
    found = hypothesis(report, "wrong.eval_sharding")
    assert report.hypotheses[0].cause_id == "wrong.eval_sharding"
    assert stage in found.title
    assert found.confidence == pytest.approx(0.65)


def test_unsynced_metrics_and_sampler_reinforce(tmp_path: Path) -> None:
    prefix = f"{_LIB}/lightning/pytorch/trainer/connectors/logger_connector/result.py:434: "
    log = "\n".join(
        [
            f"{_LIB}/lightning/pytorch/trainer/connectors/data_connector.py:441: "
            + _SAMPLER.format(stage="validate", args="devices=1, num_nodes=1"),
            prefix + _SYNC.format(metric="val_acc"),
            prefix + _SYNC.format(metric="val_loss"),
        ]
    )
    report = analyze_files(tmp_path, {"train.log": log})
    found = hypothesis(report, "wrong.eval_sharding")
    assert report.hypotheses[0].cause_id == "wrong.eval_sharding"
    assert found.confidence == pytest.approx(0.72)
    assert "val_acc, val_loss" in found.summary
    assert "sync_dist=True" in found.fix and "devices=1" in found.fix


def test_accelerate_gather_remainder(tmp_path: Path) -> None:
    line = (
        "06/12/2024 10:02:11 - INFO - accelerate.accelerator - The used dataset had no length, "
        "returning gathered tensors. You should drop the remainder yourself."
    )
    report = analyze_files(tmp_path, {"eval.log": line}, symptom="wrong")
    found = hypothesis(report, "wrong.eval_sharding")
    assert "remainder" in found.title


def test_lightning_eval_warnings_beside_a_crash_are_background(tmp_path: Path) -> None:
    """Every multi-device Lightning run prints them; next to a traceback they rank low."""
    warning = (
        "PossibleUserWarning: Using `DistributedSampler` with the dataloaders. During "
        "`trainer.validate()`, it is recommended to use `Trainer(devices=1, num_nodes=1)` to "
        "ensure each sample/batch gets evaluated exactly once. Otherwise, multi-device settings "
        "use `DistributedSampler` that replicates some samples to make sure all devices have "
        "same batch size in case of uneven inputs."
    )
    crash = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/train.py", line 12, in <module>\n'
        "    main()\n"
        "ValueError: bad shard\n"
    )
    report = analyze_files(tmp_path, {"train.log": f"{warning}\n{crash}"})
    found = hypothesis(report, "wrong.eval_sharding")
    assert found.confidence <= 0.3


def _eval_line(step: int, seconds: float, loss: str, acc: str) -> str:
    """pytorch/examples' ImageNet validation line (ProgressMeter), tab-separated."""
    return (
        f"Test: [{step:>2}/49]\tTime {seconds:6.3f} ({seconds:6.3f})\tLoss {loss} ({loss})\t"
        f"Acc@1 {acc} ({acc})\tAcc@5  92.87 ( 92.87)\n"
    )


def test_ranks_printing_the_same_eval_batch_alike_evaluate_the_whole_set(tmp_path: Path) -> None:
    console = "".join(_eval_line(0, 5.4 + r / 10, "9.5338e-01", " 75.10") for r in range(4))
    top = analyze_files(tmp_path, {"console.log": console}).verdict
    assert top is not None and (top.cause_id, top.confidence) == ("wrong.eval_sharding", 0.45)
    assert top.title.startswith("4 processes print the same evaluation batch 0/49")


@pytest.mark.parametrize(
    "files",
    [
        # sharded ranks: the same batch counter, other samples, other losses
        {f"rank{r}.log": _eval_line(0, 5.5, f"9.{r}338e-01", f" 7{r}.10") for r in range(4)},
        # one console that printed each line twice (two logging handlers)
        {"console.log": _eval_line(0, 5.5, "9.5338e-01", " 75.10") * 2},
        # one rank that printed the same batch twice
        {
            "rank0.log": _eval_line(0, 5.5, "9.5338e-01", " 75.10")
            + _eval_line(0, 5.6, "9.5338e-01", " 75.10")
        },
    ],
)
def test_eval_lines_that_differ_or_repeat_one_writer_are_no_sharding_finding(
    tmp_path: Path, files: dict[str, str]
) -> None:
    report = analyze_files(tmp_path, files)
    assert "wrong.eval_sharding" not in [h.cause_id for h in report.hypotheses]


_COUNTED = (
    "/workspace/references/classification/train.py:78: UserWarning: It looks like the dataset"
    " has {dataset} samples, but {used} samples were used for the validation, which might bias"
    " the results. Try adjusting the batch size and / or the world size. Setting the world size"
    " to 1 is always a safe bet."
)


@pytest.mark.parametrize(
    ("dataset", "used", "said", "fix"),
    [
        (50000, 50004, "4 padded repeats counted", "de-duplicate"),
        (1459, 1456, "3 samples dropped", "drop_last=False"),
    ],
)
def test_the_evaluated_sample_count_against_the_dataset(
    tmp_path: Path, dataset: int, used: int, said: str, fix: str
) -> None:
    log = f"Test:  Acc@1 69.760 Acc@5 89.075\n{_COUNTED.format(dataset=dataset, used=used)}\n"
    report = analyze_files(tmp_path, {"rank0.log": log})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("wrong.eval_sharding", 0.8)
    assert said in top.title and fix in top.fix


def _meta_matmul_error() -> str:
    """The meta kernel's own words for a matmul whose operands disagree (real torch)."""
    import torch

    with pytest.raises(RuntimeError) as raised:
        torch.mm(torch.empty(9, 18, device="meta"), torch.empty(16, 10, device="meta"))
    return f"RuntimeError: {raised.value}"


_TP_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/work/tp_plan.py", line 41, in <module>\n'
    "    out = model(x)\n"
    '  File "/venv/lib/python3.12/site-packages/torch/distributed/tensor/_dispatch.py",'
    " line 160, in dispatch\n"
    "    self.sharding_propagator.propagate(op_info)\n"
)


@requires_torch
def test_a_matmul_refused_in_shape_propagation_is_a_placement(tmp_path: Path) -> None:
    log = _TP_FRAMES + _meta_matmul_error() + "\n"
    report = analyze_files(tmp_path, {"rank0.log": log, "rank1.log": log})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("wrong.placement", 0.5)
    assert "[9, 18] by [16, 10]" in top.summary


@requires_torch
def test_the_same_refusal_under_torch_compile_is_no_placement(tmp_path: Path) -> None:
    log = (
        _TP_FRAMES.replace("torch/distributed/tensor/_dispatch.py", "torch/_dynamo/utils.py")
        + "torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in method"
        f" mm>: {_meta_matmul_error()}\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": log})
    assert all(h.cause_id != "wrong.placement" for h in report.hypotheses)
