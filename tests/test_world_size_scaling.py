"""Results tabulated by GPU count: a loss that is the GPU count times its 1-GPU value is a
reduction scaled wrongly; throughput that scales, or a loss that drifts otherwise, is not."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files
from triage.readers.signatures.metric_table import GpuTable

TABLE = """\
| GPUs | train_loss | eval_loss | samples/s |
|------|-----------|-----------|-----------|
| 1    | 0.6705    | {one}    | 310.2     |
| 8    | 0.6707    | {eight}     | 2481.6    |
"""


def causes(tmp_path: Path, text: str) -> dict[str, float]:
    report = analyze_files(tmp_path, {"results.md": text})
    return {h.cause_id: h.confidence for h in report.hypotheses}


def test_a_loss_eight_times_larger_on_eight_gpus_is_reduction_scaling(tmp_path: Path) -> None:
    found = causes(tmp_path, TABLE.format(one="0.5536", eight="4.436"))
    assert found.get("wrong.reduction_scaling") == 0.5


def test_throughput_that_scales_and_a_loss_that_drifts_are_not(tmp_path: Path) -> None:
    found = causes(tmp_path, TABLE.format(one="0.5536", eight="0.9120"))
    assert "wrong.reduction_scaling" not in found


def test_a_table_joins_into_one_line_of_rows() -> None:
    table = GpuTable("| GPUs | eval loss | ratio |")
    assert table.feed("|---|---|---|")
    assert table.feed("| 1 | 0.55 | 1.00x |") and table.feed("| 8 | 4.44 | 8.01x |")
    assert not table.feed("some prose after the table")
    assert table.text() == (
        "results by GPU count: gpus=1 eval_loss=0.55 ratio=1.00; gpus=8 eval_loss=4.44 ratio=8.01"
    )
