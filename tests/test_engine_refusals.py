"""An inference engine's own refusals at start-up, in its words (vLLM 0.33's sources and the
reports that quote them): memory others hold, a world larger than the GPUs, an expert-parallel
exchange that timed out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files

_STARTUP = (
    "ValueError: Free memory on device {device}({free}/{total} GiB) on startup is less than"
    " desired GPU memory utilization ({share}, {wanted} GiB). Decrease GPU memory utilization"
    " or reduce GPU memory used by other processes."
)


def top(tmp_path: Path, line: str) -> tuple[str, float, str]:
    h = analyze_files(tmp_path, {"engine.log": line}).hypotheses[0]
    return h.cause_id, h.confidence, h.title


def test_memory_others_hold_at_start_up(tmp_path: Path) -> None:
    line = _STARTUP.format(device="cuda:0 ", free=7.34, total=139.72, share=0.9, wanted=125.75)
    assert top(tmp_path, line) == (
        "oom.other_process",
        0.65,
        "132.4 GiB of cuda:0 was in use before the engine started",
    )
    found = analyze_files(tmp_path, {"engine.log": line}).hypotheses
    assert [(h.cause_id, h.confidence) for h in found[1:2]] == [("oom.capacity", 0.5)]


@pytest.mark.parametrize(
    ("free", "total"),
    [(70.1, 79.1), (3.22, 4.0)],  # 11% held; 0.8 GiB of a small GPU: a context, a display
    ids=["a-little-held", "small-gpu"],
)
def test_a_little_held_is_a_share_set_too_high(tmp_path: Path, free: float, total: float) -> None:
    line = _STARTUP.format(device="", free=free, total=total, share=0.9, wanted=total * 0.9)
    assert top(tmp_path, line) == (
        "oom.capacity",
        0.5,
        "The inference engine's share of the GPU is more than is free",
    )


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: World size (8) is larger than the number of available GPUs (4) in this"
        " node. If this is intentional and you are using: - ray, set"
        " '--distributed-executor-backend ray'.",
        "ValueError: Cannot provide a placement group requiring 8 GPUs"
        " (placement_group_specs=[{'GPU': 1.0}]) within 1800 seconds.",
    ],
    ids=["world-larger-than-gpus", "ray-placement"],
)
def test_a_world_larger_than_the_gpus(tmp_path: Path, line: str) -> None:
    assert top(tmp_path, line)[:2] == ("config.world_size_mismatch", 0.8)


def test_an_expert_parallel_exchange_that_timed_out_is_a_stall(tmp_path: Path) -> None:
    line = (
        "RuntimeError: Fault detected in EP all2all communication: one or more ranks timed out"
        " during dispatch/combine."
    )
    assert top(tmp_path, line)[0] == "hang.unknown"


def test_an_engine_under_an_external_launcher_without_gloo(tmp_path: Path) -> None:
    line = (
        "RuntimeError: External launcher initialized the default process group without a CPU"
        " (gloo) backend. vLLM requires both CPU and device backends. Pass"
        " backend='cpu:gloo,cuda:nccl' to torch.distributed.init_process_group()."
    )
    cause, confidence, title = top(tmp_path, line)
    assert (cause, confidence) == ("config.backend_device", 0.85) and "gloo" in title
