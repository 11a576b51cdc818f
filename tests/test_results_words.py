"""What a job prints when its results are wrong, in the words of the frameworks that check
them, as reports paste it (tests/fixtures/results_words.json, each with its issue or
source): fp16 loss scalers at their floor, replicas whose weights differ, distributed
evaluation padding its dataset, NaN guards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "results_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("apex_collapse", "wrong.nan", 0.85),
        ("fairseq_overflow", "wrong.nan", 0.85),
        ("fairseq_note", "wrong.nan", 0.85),
        ("deepspeed_floor", "wrong.nan", 0.85),
        ("fused_floor", "wrong.nan", 0.85),
        ("fp16_optimizer_floor", "wrong.nan", 0.85),
        ("megatron_hashes", "wrong.init_mismatch", 0.45),
        ("deit_padded", "wrong.eval_sharding", 0.65),
        ("sampler_teh", "wrong.eval_sharding", 0.8),
        ("lightning_nan", "wrong.nan", 0.75),
        ("mmcv_nan", "wrong.nan", 0.75),
    ],
)
def test_the_results_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"train.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


@pytest.mark.parametrize("name", ["fairseq_routine", "deepspeed_routine"])
def test_an_overflow_at_a_healthy_scale_is_no_nan(tmp_path: Path, name: str) -> None:
    """Dynamic loss scaling halves a scale in the thousands or more now and then: that is
    it working; only at its floor (1, or below 1) does every step overflow."""
    report = analyze_files(tmp_path, {"train.log": PASTES[name]["text"]})
    assert all(h.cause_id != "wrong.nan" for h in report.hypotheses)
