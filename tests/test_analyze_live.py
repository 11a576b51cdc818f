"""A real torchrun job fails with a planted fault; `triage analyze` on its logs names it.

End to end as a user meets it: torchrun (CPU gloo) writes its console output and per-rank
log folders, then the `triage` command reads the folder. The recorded variants of every
scenario are checked without torch in test_analyze_fixtures.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import requires_torch, triage_cli
from triage.scenarios.failures import FAILURES, run_failure
from triage.scenarios.failures.failure_runs import _kill_tree

# A launcher that starts a worker in a session of its own, as torchrun does, and waits.
FAKE_LAUNCHER = (
    "import subprocess, sys, time\n"
    "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
    " start_new_session=True)\n"
    "print(w.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def running(script: str) -> list[int]:
    """Pids of this test's descendants whose command line runs `script`."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if script in proc.cmdline() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_launcher_past_its_time_is_killed_with_its_workers() -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", FAKE_LAUNCHER], stdout=subprocess.PIPE, start_new_session=True
    )
    assert launcher.stdout is not None
    worker = int(launcher.stdout.readline())
    try:
        assert not gone(worker)
        _kill_tree(launcher)
        assert launcher.poll() is not None
        assert gone(worker)
    finally:
        launcher.kill()
        launcher.wait()
        if not gone(worker):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.scenario
@requires_torch
def test_crashed_rank_is_named_over_its_victims(tmp_path: Path) -> None:
    """Rank 1 raises in user code; rank 0 fails with gloo's closed connection."""
    failure = FAILURES["peer_crash"]
    run = run_failure(failure.name, tmp_path, timeout_s=90, nproc=2)
    assert not running(str(failure.script)), "the launcher or a worker outlived run_failure"
    assert failure.shows in run.console.read_text()

    done = subprocess.run(
        triage_cli("analyze", str(tmp_path), "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    hypotheses = json.loads(done.stdout)["hypotheses"]
    assert hypotheses, done.stdout
    top = hypotheses[0]
    summary = [(h["cause_id"], h["ranks"], h["confidence"]) for h in hypotheses]
    assert top["cause_id"] in {failure.cause_id, *failure.accept}, summary
    assert sorted(top["ranks"]) == list(failure.culprits), summary
    places = {
        (loc["file"], loc["line"]) for loc in [top["location"], *top["other_locations"]] if loc
    }
    assert (str(failure.script), failure.fault_line()) in places, places
