"""A rank that stops short of a collective and logs nothing is named from the logs alone.

Issue 13's second bug, on real jobs: ranks 0-2 time out in an all_reduce, rank 3 blocks
before it and logs no error. Read from the per-rank logs, with or without torchrun's failure
report (which calls rank 0, a waiter, the first failure and stops the others with SIGTERM),
the verdict names rank 3, never a rank that timed out, and says nothing a rank did not log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, requires_torch, triage_cli
from triage.scenarios import RankJob, free_port
from triage.scenarios.failures.failure_runs import _kill_tree

JOB = REPO / "tests" / "jobs" / "silent_rank.py"
pytestmark = [pytest.mark.scenario, requires_torch]


def _analyze(*paths: Path) -> dict[str, Any]:
    done = subprocess.run(
        triage_cli("analyze", "--json", *map(str, paths)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _assert_names_the_silent_rank(report: dict[str, Any]) -> None:
    hypotheses = report["hypotheses"]
    top = hypotheses[0]
    assert top["cause_id"] == "hang.rank_not_in_collective", hypotheses
    assert top["ranks"] == [3]
    assert "rank 3 logged no timeout" in top["summary"]
    said = json.dumps(hypotheses)
    assert "closed connection" not in said  # no rank logged one
    assert not any(h["cause_id"] == "comm.peer_failure" for h in hypotheses), hypotheses


def test_per_rank_logs_name_the_rank_that_logged_no_timeout(tmp_path: Path) -> None:
    with RankJob(JOB, world_size=4, log_dir=tmp_path) as job:
        deadline = time.monotonic() + 90
        while len(job.exited_ranks()) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # polled: the three waiters exit when their timers fire
        assert set(job.exited_ranks()) == {0, 1, 2}, job.logs_tail()
        assert job.live_ranks() == [3]
    _assert_names_the_silent_rank(_analyze(tmp_path))


def test_torchrun_report_does_not_turn_a_waiter_into_the_culprit(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "4",
        "--master-port",
        str(free_port()),
        "--redirects",
        "3",
        "--log-dir",
        str(tmp_path / "elastic"),
        str(JOB),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with (tmp_path / "console.log").open("wb") as console:
        launcher = subprocess.Popen(
            command, env=env, stdout=console, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            assert launcher.wait(timeout=120) != 0
        finally:
            _kill_tree(launcher)  # only if it outlived its deadline: it and its workers
            launcher.wait()
    assert "Root Cause (first observed failure)" in (tmp_path / "console.log").read_text()
    _assert_names_the_silent_rank(_analyze(tmp_path))
