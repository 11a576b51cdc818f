"""Values a program printed, pasted with no failure, are what a person shows when the
results look wrong: a results table, tensors per rank. They read as wrong.unknown, the weak
reading of text without a failure (logs.metrics_only), not as nothing at all; a logger's
lines, progress bars and NCCL's rows of numbers are no such values."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files
from triage.readers.metric_lines import values_in


@pytest.mark.parametrize(
    "text",
    [
        # development cases of the corpus: espnet's scoring table at two GPU counts, timm's
        # results row, accelerate's gathered tensor
        "| SPKR    | # Snt # Wrd | Corr    Sub    Del    Ins    Err  S.Err |\n"
        "| Sum/Avg |12612  89635 | 75.7   18.1    6.3    2.8   27.1   57.9 |\n"
        "| Sum/Avg |12612  89635 | 62.7   27.6    9.8    3.8   41.1   64.8 |",
        "456 | 2.249339835984370 | 1.0110450189209000 | 76.3519998852539 | 92.94199993652340",
        "tensor([0, 1, 2, 3], device='cuda:0')",
        # a development case: an all-gather's fp16 inputs into fp32 outputs, printed per rank
        "Tensor on rank 0: tensor([[0., 0., 0., 0., 0.]], device='cuda:0', dtype=torch.float16)\n"
        "From GPU 0: tensor([[0.0000, 0.0000, 0.0078, 0.0078, 0.0078]], device='cuda:0')",
    ],
    ids=["wer-table", "results-row", "tensor", "nested-tensor"],
)
def test_printed_values_alone_are_a_weak_wrong_results_reading(tmp_path: Path, text: str) -> None:
    [top] = analyze_files(tmp_path, {"results.txt": text + "\n"}).hypotheses
    assert (top.cause_id, top.rule_id, top.confidence) == (
        "wrong.unknown",
        "logs.metrics_only",
        0.12,
    )


@pytest.mark.parametrize(
    "line",
    [
        "[2024-05-01 10:00:02,917] [INFO] [comm.py:895:mpi_discovery] world_size=8 rank=3 local=3",
        "Epoch 0:  37%|███▋      | 370/1000 [05:12<08:51,  1.19it/s]",
        "(VllmWorker pid=4888) 12 34 56 78",
        "seed=0      11de60115ffa2390",
    ],
)
def test_a_loggers_lines_and_progress_are_no_printed_values(line: str) -> None:
    assert not values_in(line)


def test_nccls_rows_of_numbers_are_no_results(tmp_path: Path) -> None:
    text = (
        "node1:4211:4290 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7\n"
        "node1:4211:4290 [0] NCCL INFO Channel 01/02 :    0   1   2   3   4   5   6   7\n"
    )
    found = analyze_files(tmp_path, {"rank0.log": text}).hypotheses
    assert "logs.metrics_only" not in [h.rule_id for h in found]
