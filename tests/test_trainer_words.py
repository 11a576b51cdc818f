"""What the high-level trainers say when their settings and the launch disagree (Lightning,
transformers' Trainer, accelerate, the DeepSpeed runner, Python's spawn start method), as
reports paste it (tests/fixtures/trainer_words.json, each with its issue or source)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "trainer_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("lightning_cuda_initialized", "config.launcher_args", 0.7),
        ("ddp_interactive_old", "config.launcher_args", 0.75),
        ("ddp_interactive", "config.launcher_args", 0.75),
        ("mixed_precision", "config.launcher_args", 0.7),
        ("deepspeed_config_differs", "config.launcher_args", 0.7),
        ("deepspeed_config_wrapped", "config.launcher_args", 0.7),
        ("lightning_accumulation", "config.launcher_args", 0.7),
        ("main_guard", "config.launcher_args", 0.7),
        ("nproc_empty", "config.launcher_args", 0.55),
        ("port_number", "config.launcher_args", 0.55),
        ("unpicklable", "config.launcher_args", 0.45),
        ("lightning_gpus_requested", "config.device_assignment", 0.75),
        ("lightning_no_gpus", "config.device_assignment", 0.75),
        ("accelerator_unavailable", "config.device_assignment", 0.75),
        ("slot_missing", "config.device_assignment", 0.75),
        ("slot_misspelt", "config.device_assignment", 0.75),
        ("device_map_auto", "config.device_assignment", 0.8),
        ("eight_bit_devices", "config.device_assignment", 0.8),
        ("ddp_cuda_modules", "config.device_assignment", 0.8),
    ],
)
def test_the_trainers_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"train.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


def test_torch_1s_invalid_device_id_is_an_index_past_the_gpus(tmp_path: Path) -> None:
    top = analyze_files(tmp_path, {"train.log": PASTES["invalid_device_id"]["text"]}).hypotheses[0]
    assert top.cause_id == "config.device_assignment"
    assert top.confidence >= 0.7


def test_a_warning_that_runs_the_op_another_way_is_no_failure(tmp_path: Path) -> None:
    """DTensor's gloo fallback says `does not support reduce_scatter, falling back with all
    reduce!` and goes on; the error without the fallback is the backend's refusal."""
    (tmp_path / "warn").mkdir()
    (tmp_path / "error").mkdir()
    warned = analyze_files(tmp_path / "warn", {"train.log": PASTES["gloo_falls_back"]["text"]})
    assert all(h.cause_id != "config.backend_device" for h in warned.hypotheses)
    refused = "RuntimeError: ProcessGroupGloo does not support reduce_scatter\n"
    top = analyze_files(tmp_path / "error", {"train.log": refused}).hypotheses[0]
    assert top.cause_id == "config.backend_device"


def test_a_pickling_failure_outside_spawn_is_not_the_start_method(tmp_path: Path) -> None:
    """torch.save (or deepcopy) of a DDP-wrapped model fails on its local hook the same way a
    spawned process's target does; with no spawn frame and no ddp_spawn, it is not the
    launch's."""
    report = analyze_files(tmp_path, {"train.log": PASTES["ddp_model_pickled"]["text"]})
    assert all(h.cause_id != "config.launcher_args" for h in report.hypotheses)
