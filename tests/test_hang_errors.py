"""Every way a live dump can fail becomes a gap with a reason, never a traceback."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import triage_cli
from triage.readers import pyspy
from triage.registry import REGISTRY

SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


@pytest.fixture
def python_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def native_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def run_hang(
    *pids: int, env: dict[str, str] | None = None, prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = (prefix or []) + triage_cli("hang", "--json", "--pids", *map(str, pids))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)


def test_not_a_python_process_is_a_gap(
    native_sleeper: subprocess.Popen[bytes], python_sleeper: subprocess.Popen[bytes]
) -> None:
    done = run_hang(native_sleeper.pid, python_sleeper.pid)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    reasons = [g["reason"] for g in report["gaps"]]
    assert any(f"pid {native_sleeper.pid}: not a Python process" in r for r in reasons), reasons
    stacks = [e for e in report["evidence"] if e["kind"] == "stack"]
    assert [e["source"] for e in stacks] == [f"pid:{python_sleeper.pid}"]  # the rest still covered


def test_dump_timeout_is_a_gap(python_sleeper: subprocess.Popen[bytes]) -> None:
    run = REGISTRY.run("dump_stacks", {"pids": [python_sleeper.pid], "timeout_s": 0.001})
    assert "timed out" in run.gaps[0].reason
    assert run.gaps[0].hint


def test_missing_py_spy_says_how_to_install(
    python_sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    run = REGISTRY.run("dump_stacks", {"pids": [python_sleeper.pid]})
    assert run.result.status.value == "error"
    assert run.result.error == "py-spy is not installed"
    assert "pip install py-spy" in (run.gaps[0].hint or "")


def test_gone_pid_is_a_usage_error_of_one_line_and_no_report(tmp_path: Path) -> None:
    done = run_hang(2**22 + 4321)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("triage: error: no process with pid 4198625")
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop privileges"
)
def test_permission_denied_names_ptrace_fix(python_sleeper: subprocess.Popen[bytes]) -> None:
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = dict(os.environ, HOME="/tmp")
    done = run_hang(python_sleeper.pid, env=env, prefix=prefix)
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    gaps = report["gaps"]
    assert any("permission denied" in g["reason"] for g in gaps), gaps
    assert any("CAP_SYS_PTRACE" in (g["hint"] or "") for g in gaps)


def test_usage_errors_exit_2_without_traceback() -> None:
    done = subprocess.run(triage_cli("hang"), capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("triage: error:") and "Traceback" not in done.stderr
    bad = subprocess.run(
        triage_cli("hang", "--pids", "abc"), capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "process ids" in bad.stderr


def test_early_dumps_start_only_for_the_pids_after_pids(
    python_sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`start_early` reads `hang --pids P...` only: a launcher pid or a timeout is no rank."""
    started: list[int] = []

    def start_dump(_bin: str, pid: int, with_locals: bool, stdout: int) -> subprocess.Popen[str]:
        started.append(pid)
        return subprocess.Popen(["true"], stdout=stdout, text=True)

    monkeypatch.setattr(pyspy, "start_dump", start_dump)
    pyspy.start_early(["hang", "--launcher-pid", "7", "--pids", "11", "12,13", "--timeout", "5"])
    pyspy.start_early(["hang", "--pids=14", "--json"])
    pyspy.start_early(["analyze", "--pids", "15"])
    assert pyspy._starting is not None
    pyspy._starting.join()  # dumps start from a thread, while the CLI imports
    assert started == [11, 12, 13, 14]
    _discard_early()


def _discard_early() -> None:
    for _, dump in pyspy._early.values():
        dump.process.kill()
        dump.communicate(timeout_s=10)
    pyspy._early.clear()


def test_the_next_early_dump_starts_when_any_running_one_ends(
    python_sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow dump holds one place, not the queue: with two at a time and the first dump
    never ending, the other five all start without waiting for it."""
    started: list[int] = []

    def start_dump(_bin: str, pid: int, with_locals: bool, stdout: int) -> subprocess.Popen[str]:
        started.append(pid)
        command = ["sleep", "600"] if pid == 1 else ["true"]
        return subprocess.Popen(command, stdout=stdout, text=True)

    monkeypatch.setattr(pyspy, "start_dump", start_dump)
    monkeypatch.setattr(pyspy, "_IN_FLIGHT", 2)
    monkeypatch.setattr(pyspy, "PACE_WAIT_S", 600.0)
    try:
        pyspy.start_early(["hang", "--pids", "1,2,3,4,5,6"])
        assert pyspy._starting is not None
        pyspy._starting.join(timeout=60)
        assert not pyspy._starting.is_alive(), "the starter waited for the slow first dump"
        assert started == [1, 2, 3, 4, 5, 6]
        assert pyspy._early[1][1].process.poll() is None  # still running, not waited out
    finally:
        _discard_early()


def test_an_early_dump_is_the_one_the_stack_tool_reads(
    python_sleeper: subprocess.Popen[bytes],
) -> None:
    pyspy.start_early(["hang", "--pids", str(python_sleeper.pid)])
    assert pyspy._starting is not None
    pyspy._starting.join()
    early = pyspy._early[python_sleeper.pid][1]
    run = REGISTRY.run("dump_stacks", {"pids": [python_sleeper.pid], "with_locals": False})
    assert early.process.returncode is not None and pyspy._early == {}  # consumed, not run again
    assert [e.kind for e in run.evidence] == ["stack"]


DEEP_SLEEPER = """
import sys, threading, time
def down(n, ready):
    if n:
        return down(n - 1, ready)
    ready.set()
    while True:
        time.sleep(0.05)
events = [threading.Event() for _ in range(8)]
for event in events[1:]:
    threading.Thread(target=down, args=(400, event), daemon=True).start()
for event in events[1:]:
    event.wait()
print("ready", flush=True)
down(400, events[0])
"""


def test_an_early_dump_bigger_than_a_pipe_does_not_hold_up_the_next(
    python_sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Early dumps run a few at a time: the starter waits for one to end before the next.
    A rank whose stacks outgrow a pipe's buffer must end without anyone reading it."""
    deep = subprocess.Popen([sys.executable, "-c", DEEP_SLEEPER], stdout=subprocess.PIPE)
    try:
        assert deep.stdout is not None and deep.stdout.readline() == b"ready\n"
        monkeypatch.setattr(pyspy, "_IN_FLIGHT", 1)
        monkeypatch.setattr(pyspy, "PACE_WAIT_S", 60.0)
        pyspy.start_early(["hang", "--pids", str(deep.pid), str(python_sleeper.pid)])
        assert pyspy._starting is not None
        pyspy._starting.join(timeout=30)
        assert not pyspy._starting.is_alive()  # it did not wait out PACE_WAIT_S
        binary = pyspy.binary()
        assert binary is not None
        big = pyspy.dump_one(binary, deep.pid, with_locals=False, timeout_s=10)
        small = pyspy.dump_one(binary, python_sleeper.pid, with_locals=False, timeout_s=10)
    finally:
        deep.kill()
        deep.wait()
    assert big.threads is not None and small.threads is not None, (big.error, small.error)
    assert len(json.dumps(big.threads)) > 1 << 16  # more than a pipe holds
    assert pyspy._early == {}


def test_early_dumps_run_a_few_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """32 dumps started at once starve the CLI's import on a small host; the starter keeps
    at most `_IN_FLIGHT` running."""
    running: set[int] = set()
    most = 0

    class Started:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def wait(self, timeout: float) -> int:
            running.discard(self.pid)
            return 0

    def start(binary: str, pid: int, with_locals: bool, stdout: int) -> Started:
        nonlocal most
        running.add(pid)
        most = max(most, len(running))
        return Started(pid)

    monkeypatch.setattr(pyspy, "start_dump", start)
    monkeypatch.setattr(pyspy, "binary", lambda: "py-spy")
    monkeypatch.setattr(pyspy, "_IN_FLIGHT", 3)
    pyspy.start_early(["hang", "--pids", *map(str, range(100, 132))])
    assert pyspy._starting is not None
    pyspy._starting.join()
    assert most == 3 and len(pyspy._early) == 32
    for _, early in pyspy._early.values():
        early.close()
    pyspy._early.clear()


def _frames(pid: int) -> list[str]:
    run = REGISTRY.run("dump_stacks", {"pids": [pid], "with_locals": False})
    return [f["function"] for e in run.evidence if e.kind == "stack" for f in e.data["frames"]]


def test_a_stopped_rank_is_named_stopped_not_lost(python_sleeper: subprocess.Popen[bytes]) -> None:
    """py-spy cannot pause a SIGSTOPped process, but reads it without pausing: its state
    says it is stopped, and where."""
    deadline = time.monotonic() + 30
    while _frames(python_sleeper.pid) != ["<module>"] and time.monotonic() < deadline:
        time.sleep(0.05)  # polled: only the script's own frame, not an import at start-up
    os.kill(python_sleeper.pid, signal.SIGSTOP)
    try:
        proc = psutil.Process(python_sleeper.pid)
        deadline = time.monotonic() + 10
        while proc.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)  # polled: the stop lands asynchronously
        run = REGISTRY.run("dump_stacks", {"pids": [python_sleeper.pid], "timeout_s": 10})
    finally:
        os.kill(python_sleeper.pid, signal.SIGCONT)
    (stack,) = [e for e in run.evidence if e.kind == "stack"]
    assert stack.data["activity"] == "stopped" and not run.gaps
    assert [f["function"] for f in stack.data["frames"]][:1] == ["<module>"]
    assert "read without pausing" in stack.data["detail"]


def test_early_dumps_are_paced_without_pidfds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without pidfd_open (before Linux 5.3): each wait is on the oldest dump."""
    started: list[int] = []

    def start_dump(_bin: str, pid: int, with_locals: bool, stdout: int) -> subprocess.Popen[str]:
        started.append(pid)
        return subprocess.Popen(["true"], stdout=stdout, text=True)

    def no_pidfd(pid: int) -> int:
        raise OSError(errno.ENOSYS, "pidfd_open")

    monkeypatch.setattr(pyspy, "start_dump", start_dump)
    monkeypatch.setattr(pyspy, "binary", lambda: "py-spy")
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    monkeypatch.setattr(pyspy, "_IN_FLIGHT", 1)
    try:
        pyspy.start_early(["hang", "--pids", "31,32,33"])
        assert pyspy._starting is not None
        pyspy._starting.join(timeout=60)
        assert started == [31, 32, 33]
        assert all(dump.process.wait(10) == 0 for _, dump in pyspy._early.values())
    finally:
        _discard_early()


def test_early_dumps_start_while_the_cli_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting 32 dumps takes as long as importing the CLI: `start_early` returns at once
    and the dump tool waits for the starts it takes over."""
    release = threading.Event()
    made: dict[int, subprocess.Popen[str]] = {}

    def slow_start(binary: str, pid: int, with_locals: bool, stdout: int) -> subprocess.Popen[str]:
        assert release.wait(30)
        made[pid] = subprocess.Popen(["true"], stdout=stdout, text=True)
        return made[pid]

    monkeypatch.setattr(pyspy, "start_dump", slow_start)
    monkeypatch.setattr(pyspy, "binary", lambda: "py-spy")
    pyspy.start_early(["hang", "--pids", "21", "22"])
    assert pyspy._early == {}  # not started yet, and start_early did not wait
    release.set()
    for pid in (22, 21):
        early = pyspy.take_early("py-spy", pid)
        assert early is not None and early.process is made[pid]
        early.communicate(timeout_s=10)
