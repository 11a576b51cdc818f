"""The terminal report reads calmly at 80 columns: no word cut, a long path named once,
one line for a folder of empty logs, advice that fits the job's backend and settings, and
counts and rank lists that agree with their nouns and verbs."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import REPO, analyze_files
from tests.test_environment import CHILD, clean_env, rank_env
from tests.test_hang_rules import report_of, source, state
from tests.test_render import sample
from triage.advice import useful_steps
from triage.engine import diagnose, job_targets
from triage.models import Report
from triage.readers import host_facts
from triage.render.terminal import print_report
from triage.text import agree, cut_at_word, plural, rank_subject

WATCHDOG = (
    "[rank0]:[E1125 12:00:00.123456 1234 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID "
    "0(default_pg) Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
    "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600003 "
    "milliseconds before timing out."
)
#: A real CPU gloo job (torchrun, 3 ranks): rank 1 raises, its peers lose the connection.
GLOO_JOB = REPO / "tests" / "fixtures" / "logs" / "peer_crash"


def render(report: Report) -> str:
    out = io.StringIO()
    print_report(report, Console(file=out, width=80, color_system=None))
    return out.getvalue()


def section(text: str, title: str) -> list[str]:
    """The lines of one titled list of the report, its title left out."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = next((n for n in range(start, len(lines)) if not lines[n].startswith(" ")), len(lines))
    return lines[start:end]


@pytest.fixture
def gloo_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A live rank of a CPU job on a host with no NVIDIA GPU and no nvidia-smi."""
    which = shutil.which
    monkeypatch.setattr(host_facts, "DEVICE_DIR", tmp_path)
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: None if name == "nvidia-smi" else which(name)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=clean_env() | rank_env(0, world=1),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_80_columns_keep_every_token_whole_under_a_hanging_indent(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"rank0.log": WATCHDOG})
    text = render(report)
    lines = text.splitlines()
    assert lines[0].startswith("╭") and "verdict" in lines[0]
    assert all(len(line) <= 80 for line in lines)
    assert "OpType=ALLREDUCE," in text  # the old report cut it at 160 characters: "OpType=ALLR"
    assert cut_at_word("WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8)", 40) == (
        "WorkNCCL(SeqNum=12, OpType=ALLREDUCE…"
    )
    for title in ("Evidence", "Next steps"):
        items = section(text, title)
        assert len(items) > 2 and items[0].startswith("  - ")
        assert all(line.startswith(("  - ", "    ")) for line in items), items


def test_a_long_common_path_is_named_once(tmp_path: Path) -> None:
    text = render(sample(tmp_path))  # the rules' own summaries repeat train.py's full path
    assert text.count(f"{tmp_path}/") == 1
    assert f"Paths under {tmp_path}/" in text
    rows = [line for line in text.splitlines() if "│" in line and not line.startswith("│")]
    assert "train.py:8" in rows[0] and "train.py:6" in rows[1]  # the groups, relative to it


def test_a_gloo_job_on_cpu_gets_no_nccl_advice_and_no_nvidia_smi_gap(gloo_rank: int) -> None:
    report = diagnose("hang", job_targets(pids=[gloo_rank]))
    host = next(item for item in report.evidence if item.id == "env:host")
    assert "no NVIDIA GPU" in host.summary
    assert not [gap for gap in report.gaps if gap.source == "nvidia-smi"]
    assert not [step for step in report.next_steps if "NCCL_" in step], report.next_steps
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in " ".join(report.next_steps)
    assert "NCCL" not in " ".join(section(render(report), "Next steps"))
    logs = diagnose(None, job_targets(paths=[str(GLOO_JOB)]))
    assert logs.hypotheses[0].cause_id == "comm.peer_failure"
    assert not [step for step in logs.next_steps if "NCCL_" in step], logs.next_steps


def test_settings_every_rank_already_has_are_not_advised_again() -> None:
    """What `triage run` set for the whole job, or each rank's environment, holds them."""
    steps = [
        "Set NCCL_DEBUG=INFO (NCCL_DEBUG_FILE per rank) when all ranks wait in one collective.",
        "Re-run with NCCL_DEBUG=INFO NCCL_DEBUG_FILE=nccl.%h.%p to make it name itself.",
        "Re-run with TORCH_DISTRIBUTED_DEBUG=DETAIL to make mismatches fail.",
        "Set NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the transports.",
    ]
    run = Report(
        symptom="hang",
        playbook="hang",
        targets={"env_set": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/out/nccl/nccl.%h.%p"}},
    )
    assert useful_steps(steps, run) == steps[2:]
    assert useful_steps(steps, Report(symptom="hang", playbook="hang")) == steps


def test_six_empty_rank_logs_are_one_gap_line(tmp_path: Path) -> None:
    attempt = tmp_path / "logs" / "attempt_0"
    for rank in range(3):
        (attempt / str(rank)).mkdir(parents=True)
        for stream in ("stdout", "stderr"):
            (attempt / str(rank) / f"{stream}.log").touch()
    (tmp_path / "console.log").write_text(WATCHDOG + "\n")
    report = diagnose(None, job_targets(paths=[str(tmp_path)]))
    empty = [gap for gap in report.gaps if "empty" in gap.reason]
    assert len(empty) == 1, report.gaps
    assert empty[0].reason == (
        "6 empty files: 0/stderr.log, 0/stdout.log, … (torchrun per-rank logs)"
    )
    assert (
        len([line for line in section(render(report), "Gaps (not seen)") if "empty" in line]) == 1
    )


def test_counts_and_rank_subjects_agree(tmp_path: Path) -> None:
    assert (plural(1, "gap"), plural(2, "gap"), plural(4096, "rank")) == (
        "1 gap",
        "2 gaps",
        "4,096 ranks",
    )
    assert (agree(1, "stand"), agree(1, "are"), agree(1, "reach"), agree(2, "wait")) == (
        "stands",
        "is",
        "reaches",
        "wait",
    )
    assert (rank_subject([2], "stand"), rank_subject([0, 1], "stand")) == (
        "rank 2 stands",
        "ranks 0-1 stand",
    )
    nothing = diagnose("hang", job_targets(paths=[str(tmp_path / "gone.log")]))
    assert "no evidence, 1 gap)" in nothing.hypotheses[0].summary
    f = source(tmp_path)
    busy = report_of(state(0, "all_reduce", f, 6), state(1, None, f, 7, active=True))
    assert "Rank 0 waits in" in busy.hypotheses[0].summary
    two = report_of(
        *(state(r, None, f, 7, active=True) for r in (0, 1)),
        *(state(r, "all_reduce", f, 6) for r in (2, 3)),
    ).hypotheses[0]
    assert two.title.startswith("ranks 0-1 are not in the collective")
    assert "Ranks 2-3 wait in" in two.summary
    one = report_of(state(3, "barrier", f, 9), *(state(r, "all_reduce", f, 6) for r in (0, 1, 2)))
    assert "Rank 3 already stands after the loop" in one.hypotheses[0].summary
    both = report_of(*(state(r, "barrier", f, 9) for r in (2, 3)), state(0, "all_reduce", f, 6))
    assert "Ranks 2-3 already stand after the loop" in both.hypotheses[0].summary
    assert "while rank 0 still waits inside it" in both.hypotheses[0].summary
    peers = diagnose(None, job_targets(paths=[str(GLOO_JOB)])).hypotheses[0]
    assert "Ranks 0,2 only report losing it" in peers.summary
