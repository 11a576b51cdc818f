"""What ranks print about themselves, compared across ranks, and metrics without a failure:
state that must match and does not, data that must differ and does not, and numbers that
are the whole report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files, hypothesis

RULES = REPO / "tests/rules"
WATCHDOG = (
    "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation"
    " timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,"
    " Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
)


def causes(tmp_path: Path, text: str) -> list[str]:
    return [h.cause_id for h in analyze_files(tmp_path, {"train.log": text}).hypotheses]


def test_a_flag_that_differs_across_ranks_in_a_real_job(tmp_path: Path) -> None:
    console = (RULES / "logs.rank_state_differs/flag_broadcast_into_copy/console.log").read_text()
    top = analyze_files(tmp_path, {"console.log": console}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("wrong.init_mismatch", "logs.rank_state_differs")
    assert top.title == "ranks disagree on `amp`"
    assert "rank 0: amp=True" in top.summary and "rank 1: amp=False" in top.summary


def test_the_same_batches_on_two_ranks_of_a_real_job(tmp_path: Path) -> None:
    console = (RULES / "logs.rank_data_repeats/no_sampler_two_ranks/console.log").read_text()
    top = analyze_files(tmp_path, {"console.log": console}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("wrong.seeding", "logs.rank_data_repeats")
    assert top.title == "ranks 0, 1 print the same `indices` at step 0"


@pytest.mark.parametrize(
    "text",
    [
        # a weight checksum, at the same step
        "[rank 0] step 0 param checksum: 1234.5\n[rank 1] step 0 param checksum: 1187.25\n",
        # a dtype word
        "rank 0: dtype=bfloat16\nrank 1: dtype=float16\n",
    ],
)
def test_state_every_replica_shares_differs(tmp_path: Path, text: str) -> None:
    assert hypothesis(analyze_files(tmp_path, {"train.log": text}), "wrong.init_mismatch")


@pytest.mark.parametrize(
    "text",
    [
        # the device follows the rank's own number: the same setting
        "rank 0: device='cuda:0'\nrank 1: device='cuda:1'\n",
        "rank 0: backend=cuda:0\nrank 1: backend=cuda:1\n",
        # losses and gradients differ per rank before their reduction
        "rank 0: loss=2.31\nrank 1: loss=2.47\n",
        "rank 0: grad_norm=1.5\nrank 1: grad_norm=1.7\n",
        # a number that is not named after the weights
        "rank 0: lr_scale=1.0\nrank 1: lr_scale=2.0\n",
        # one value on every rank
        "rank 0: amp=True\nrank 1: amp=True\n",
    ],
)
def test_values_that_may_differ_or_agree_are_no_finding(tmp_path: Path, text: str) -> None:
    assert "wrong.init_mismatch" not in causes(tmp_path, text)


@pytest.mark.parametrize(
    "text",
    [
        # a group's membership is the same list on every rank by design
        "rank 0: group ranks: [0, 1, 2, 3]\nrank 1: group ranks: [0, 1, 2, 3]\n",
        # batches that differ per rank
        "rank 0: batch indices: [1, 5, 9, 13]\nrank 1: batch indices: [2, 6, 10, 14]\n",
        # lists too short to tell a repeat from chance
        "rank 0: batch indices: [1, 5]\nrank 1: batch indices: [1, 5]\n",
        # the same list at two different steps
        "rank 0: step 0 indices: [1, 5, 9, 13]\nrank 1: step 1 indices: [1, 5, 9, 13]\n",
    ],
)
def test_lists_that_may_repeat_are_no_finding(tmp_path: Path, text: str) -> None:
    assert "wrong.seeding" not in causes(tmp_path, text)


def test_a_failure_in_the_text_silences_the_rank_prints(tmp_path: Path) -> None:
    prints = "rank 0: amp=True\nrank 1: amp=False\n"
    prints += "rank 0: batch indices: [1, 5, 9, 13]\nrank 1: batch indices: [1, 5, 9, 13]\n"
    found = causes(tmp_path, prints + WATCHDOG)
    assert "wrong.init_mismatch" not in found and "wrong.seeding" not in found


@pytest.mark.parametrize(
    "line",
    [
        "step 120 | loss: 1.4401 | lr: 5.56e-06 | grad_norm: 4.7373",
        "Test:  Acc@1 69.762 Acc@5 89.076",
        "__main__-Mean SISNR is 6.234192698448896",
        " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.356",
        "epoch 3 train loss 2.61e+02 valid ACC 1.86e-01",
        # a name that goes on, beside the loop's own memory figure (no failure either)
        "Epoch [1][500/58633] lr: 1.996e-02, memory: 4851, loss_rpn_cls: 2.5725",
        # a terminal's colour codes whose ESC was lost in the paste
        "[31mstep:  5  [32mloss:  5.59510  [38;2;180;60;0mgrad_norm:  2.4778",
    ],
)
def test_metrics_without_a_failure_are_a_weak_wrong_results_reading(
    tmp_path: Path, line: str
) -> None:
    top = analyze_files(tmp_path, {"train.log": line}).hypotheses[0]
    assert (top.cause_id, top.rule_id, top.confidence) == (
        "wrong.unknown",
        "logs.metrics_only",
        0.12,
    )
    assert "triage hang" in top.confirm


@pytest.mark.parametrize(
    "line",
    ["lossless compression saved 3 GiB", "mapped 12 files", "the answer is 42 in power 3"],
)
def test_words_that_only_contain_a_metric_name_are_not_metrics(tmp_path: Path, line: str) -> None:
    assert "wrong.unknown" not in causes(tmp_path, line)


def test_metrics_beside_a_failure_give_way_to_it(tmp_path: Path) -> None:
    found = causes(tmp_path, "[rank1]: step 3 loss: 2.31\n" + WATCHDOG)
    assert found and found[0].startswith("hang.") and "wrong.unknown" not in found


@pytest.mark.parametrize(
    ("symptom", "rule"),
    [
        ("wrong-results", "logs.metrics_only"),
        ("hang", "logs.log_stops"),
        ("oom", "engine.fallback"),
    ],
)
def test_a_named_symptom_keeps_only_the_readings_of_its_own_family(
    tmp_path: Path, symptom: str, rule: str
) -> None:
    text = "2024-01-02 10:00:00 INFO step 100 loss: 2.31\n"
    found = analyze_files(tmp_path, {"t.log": text}, symptom=symptom).hypotheses
    assert [h.rule_id for h in found] == [rule]


def test_tensor_parallel_ranks_with_different_batches(tmp_path: Path) -> None:
    text = "".join(f"TP{tp}: Prefill batch. #new-seq: {2 if tp < 2 else 3}\n" for tp in range(4))
    top = analyze_files(tmp_path, {"server.log": text}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("hang.mismatched_collective", "logs.tp_ranks_diverge")
    assert "TP0: #new-seq=2" in top.summary and "TP3: #new-seq=3" in top.summary


@pytest.mark.parametrize(
    "text",
    [
        # memory and timing differ per rank by design
        "TP0: Load weight end. avail mem=37.21 GB\nTP1: Load weight end. avail mem=37.23 GB\n",
        # the same batch on every rank
        "TP0: batch_size()=24\nTP1: batch_size()=24\n",
        # the device follows the rank's own number
        "TP0: device=cuda:0\nTP1: device=cuda:1\n",
    ],
)
def test_tensor_parallel_values_that_may_differ_or_agree(tmp_path: Path, text: str) -> None:
    assert "hang.mismatched_collective" not in causes(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "confidence"),
    [
        ("hello from rank -1, world size -1\nhello from rank -1, world size -1\n", 0.5),
        ("[1,0]<stdout>:rank: 0, world_size: 1\n[1,1]<stdout>:rank: 0, world_size: 1\n", 0.45),
    ],
    ids=["minus-one", "each-alone"],
)
def test_processes_that_never_joined_one_world(
    tmp_path: Path, text: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"job.log": text}).hypotheses[0]
    assert (top.rule_id, top.confidence) == ("logs.world_not_joined", confidence)


@pytest.mark.parametrize(
    "text",
    [
        "rank 0 world size 1\nrank 0 world size 1\n",  # one writer, twice
        "rank 1 / size 4, local rank 1 / local size 4\n",
    ],
)
def test_a_world_that_may_be_right_is_no_finding(tmp_path: Path, text: str) -> None:
    assert "config.world_size_mismatch" not in causes(tmp_path, text)


def test_metrics_a_few_lines_before_the_end_are_read(tmp_path: Path) -> None:
    text = "Accuracy: 0.000\nInvalid: 1.000\nOutput throughput: 10103.492 token/s\n"
    top = analyze_files(tmp_path, {"bench.log": text}).hypotheses[0]
    assert (top.rule_id, top.cause_id) == ("logs.metrics_only", "wrong.unknown")
    assert "Accuracy: 0.000" in top.summary
