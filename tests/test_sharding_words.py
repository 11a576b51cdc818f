"""FSDP's, DTensor's and pipelining's refusals at run time, as torch 2.x words them (and as
users pasted them, where a thread holds one): FSDP's compute device against the rank's, its
check that the ranks all-gather the same parameters, DTensor refusing mixed tensors,
meshes or layouts, and ranks (or pipeline stages) whose tensors differ in shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause", "confidence"),
    [
        (
            "ValueError: Inconsistent compute device and `device_id` on rank 0: cuda:1 vs cuda:0",
            "config.device_assignment",
            0.7,
        ),
        (
            "AssertionError: Expected `FlatParameter` to be on the compute device cuda:1 but got"
            " cuda:0",
            "config.device_assignment",
            0.7,
        ),
        (
            "RuntimeError: Forward order differs across ranks: rank 0 is all-gathering parameters"
            " for [['vision_tower.blocks.0.attn.qkv.weight']] while rank 2 is all-gathering"
            " parameters for [['language_model.layers.0.self_attn.q_proj.weight']]",
            "hang.mismatched_collective",
            0.7,
        ),
        (
            "UserWarning: Forward order differs from that of the first iteration on rank 0 --"
            " collectives are unchecked and may give incorrect results or hang",
            "hang.mismatched_collective",
            0.4,
        ),
        # meta-pytorch/torchtune: a plain tensor among a tensor-parallel model's DTensors
        (
            "[rank1]: RuntimeError: aten.mm.default: got mixed torch.Tensor and DTensor, need to"
            " convert all torch.Tensor to DTensor before calling distributed operators!",
            "wrong.placement",
            0.55,
        ),
        (
            "RuntimeError: DTensor does not support cross-mesh operation on"
            " aten._foreach_norm.Scalar! Got meshes: DeviceMesh((dp_shard=4), 'cuda', stride=(2,))"
            " DeviceMesh((dp_shard=4, tp=2), 'cuda', stride=(2, 1)).",
            "wrong.placement",
            0.55,
        ),
        (
            "RuntimeError: Can not redistribute from Replicate() to Partial(sum), only Shard to"
            " Partial(sum) redistribution is supported!",
            "wrong.placement",
            0.55,
        ),
        (
            "ValueError: Inconsistent tensor metadata (including shape and stride) across ranks.",
            "hang.shape_mismatch",
            0.65,
        ),
        (
            "torch.distributed.pipelining._utils.PipeliningShapeError: Stage 1 forward inputs:"
            " value 0 has a shape mismatch: expected torch.Size([2, 2048, 4096]) actual"
            " torch.Size([1, 2048, 4096])",
            "hang.shape_mismatch",
            0.65,
        ),
        # NVIDIA-NeMo: Megatron's rerun check of an infinite grad norm
        (
            "Unexpected result inf (message='found Inf in local grad norm for bucket #6 in"
            " backward pass before data-parallel communication collective')",
            "wrong.nan",
            None,
        ),
    ],
    ids=[
        "fsdp-device-id",
        "fsdp-flat-param-device",
        "fsdp-forward-order",
        "fsdp-order-changed",
        "dtensor-mixed",
        "dtensor-cross-mesh",
        "dtensor-redistribute",
        "dtensor-from-local",
        "pipelining-shape",
        "megatron-inf",
    ],
)
def test_the_refusal_names_its_cause(
    tmp_path: Path, line: str, cause: str, confidence: float | None
) -> None:
    top = analyze_files(tmp_path, {"rank1.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause, top.title
    assert confidence is None or top.confidence == confidence


def test_dtensor_says_what_it_refused(tmp_path: Path) -> None:
    line = (
        "[rank0]: RuntimeError: aten.cat.default: got mixed torch.Tensor and DTensor, need to"
        " convert all torch.Tensor to DTensor before calling distributed operators!"
    )
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert top.title == "DTensor refused an op: a plain tensor mixed with DTensors"
    assert "DTensor.from_local" in top.fix


def test_a_custom_op_dtensor_has_no_rule_for_is_no_layout_of_the_plan(tmp_path: Path) -> None:
    """pytorch/torchtitan#875: an NPU kernel without a DTensor sharding rule, under context
    parallel; the plan's placements are not what failed."""
    line = (
        "RuntimeError: npu.npu_fusion_attention.default: got mixed torch.Tensor and DTensor,"
        " need to convert all torch.Tensor to DTensor before calling distributed operators."
    )
    causes = [h.cause_id for h in analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses]
    assert "wrong.placement" not in causes
