"""A run's log that ends mid-run with no error and no end: the last-resort hang reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

HUNG = REPO / "tests/rules/logs.log_stops/rank_logs_of_a_hung_job"


def test_the_rank_logs_of_a_real_hung_job(tmp_path: Path) -> None:
    logs = {name: (HUNG / name).read_text() for name in ("rank0.log", "rank1.log")}
    top = analyze_files(tmp_path, logs).hypotheses[0]
    assert (top.cause_id, top.rule_id, top.confidence) == ("hang.unknown", "logs.log_stops", 0.1)
    assert top.title == "2 logs end mid-run with no error: the job may hang there"
    assert "step 3: forward and backward" in top.summary


@pytest.mark.parametrize(
    "last",
    [
        "2021-11-24 08:11:55,957 INFO training on multiple gpus, this gpu 3",
        "[2025-02-22 08:21:43 TP31] Load weight end. type=DeepseekV3ForCausalLM, avail mem=37 GB",
        "I1028 12:13:38.412766 632325 ProcessGroupNCCL.cpp:666] [Rank 1] ProcessGroupNCCL"
        " initialized with following options:",
        "INFO Start training",
    ],
)
def test_a_logger_line_without_an_end_is_where_it_stopped(tmp_path: Path, last: str) -> None:
    top = analyze_files(tmp_path, {"train.log": f"setting up\n{last}\n"}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("hang.unknown", "logs.log_stops")


@pytest.mark.parametrize(
    "last",
    [
        "2021-11-24 09:00:01,000 INFO Training finished in 3:02:11",
        "2021-11-24 09:00:01,000 INFO saved checkpoint to /ckpt/last.pt",
        # not a logger's line: a table, a command's output
        "GPU1    NODE     X      0-63            0",
    ],
)
def test_a_log_that_ended_or_is_no_log_is_no_finding(tmp_path: Path, last: str) -> None:
    report = analyze_files(tmp_path, {"train.log": f"2021-11-24 08:00:00,000 INFO start\n{last}\n"})
    assert "logs.log_stops" not in [h.rule_id for h in report.hypotheses]


def test_a_failure_in_the_text_is_read_instead(tmp_path: Path) -> None:
    text = (
        "2021-11-24 08:11:55,957 INFO training\n"
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "2021-11-24 08:11:56,000 INFO still here\n"
    )
    report = analyze_files(tmp_path, {"train.log": text})
    assert "logs.log_stops" not in [h.rule_id for h in report.hypotheses]


def test_metrics_that_end_a_log_rank_the_wrong_results_reading_first(tmp_path: Path) -> None:
    text = "2024-01-02 10:00:00 INFO step 100 loss: 2.31 grad_norm: 1.2\n"
    found = [(h.cause_id, h.rule_id) for h in analyze_files(tmp_path, {"t.log": text}).hypotheses]
    assert found[:2] == [("wrong.unknown", "logs.metrics_only"), ("hang.unknown", "logs.log_stops")]


def test_a_record_a_logger_line_opened_is_where_it_stopped(tmp_path: Path) -> None:
    """torch 1.10's ProcessGroupNCCL prints its options below the line that announces them
    (a development case: a broadcast only rank 0 enters, the log stops in that block)."""
    text = (
        "I1028 12:13:38.412766 632325 ProcessGroupNCCL.cpp:666] [Rank 1] ProcessGroupNCCL"
        " initialized with following options:\n"
        "NCCL_ASYNC_ERROR_HANDLING: 1\n"
        "NCCL_DESYNC_DEBUG: 0\n"
        "TIMEOUT(ms): 5000\n"
    )
    top = analyze_files(tmp_path, {"rank1.log": text}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("hang.unknown", "logs.log_stops")


@pytest.mark.parametrize(
    "text",
    [
        # the record's opening line says the run ended
        "2021-11-24 09:00:01,000 INFO Training finished, summary:\nloss: 0.12\n",
        # `KEY: value` lines below a line that opened nothing
        "2021-11-24 09:00:01,000 INFO start training\nloss: 0.12\n",
        # lines that continue no record
        "2021-11-24 09:00:01,000 INFO options:\n8 7 6 5\n",
    ],
)
def test_a_record_that_ended_or_continues_nothing_is_no_stop(tmp_path: Path, text: str) -> None:
    report = analyze_files(tmp_path, {"train.log": text})
    assert "logs.log_stops" not in [h.rule_id for h in report.hypotheses]
