"""Lightning's per-rank seed lines: one seed on every rank is wrong.seeding only while
the text shows no failure of its own (most Lightning jobs print these lines)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

SEEDS = "[rank: 0] Global seed set to 7\n[rank: 1] Seed set to 7\n"


def test_one_seed_on_every_rank_is_a_weak_seeding_finding(tmp_path: Path) -> None:
    top = analyze_files(tmp_path, {"train.log": SEEDS}).hypotheses[0]
    assert (top.cause_id, top.rule_id, top.confidence) == ("wrong.seeding", "logs.same_seed", 0.25)


def test_seeds_that_differ_per_rank_are_no_finding(tmp_path: Path) -> None:
    text = "[rank: 0] Global seed set to 7\n[rank: 1] Global seed set to 8\n"
    report = analyze_files(tmp_path, {"train.log": text})
    assert "wrong.seeding" not in [h.cause_id for h in report.hypotheses]


def test_a_failure_in_the_text_silences_the_seed_lines(tmp_path: Path) -> None:
    failure = (
        "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation"
        " timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,"
        " Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
    )
    report = analyze_files(tmp_path, {"train.log": SEEDS + failure})
    assert "wrong.seeding" not in [h.cause_id for h in report.hypotheses]
