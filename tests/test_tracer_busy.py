"""One process, several tracers: only one can pause it at a time.

py-spy answers "Failed to suspend process: EPERM" when another tracer is attached, which
once read as a missing CAP_SYS_PTRACE. A dump now tries again while the other one holds
the process, and a process still held is a gap that names the holder (its pid from
/proc/PID/status TracerPid), never a permission problem. Real tracers only: concurrent
py-spy dumps, `triage hang` runs, strace and gdb (installed with apt-get when missing, or
the test is skipped).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import triage_cli
from triage.readers import pyspy
from triage.registry import REGISTRY, ToolRun

SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"
CONCURRENT = 8


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A live Python process that py-spy has read once (so it is ready to be read)."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER])
    try:
        binary = pyspy.binary()
        assert binary is not None, "py-spy ships with the package"
        deadline = time.monotonic() + 30
        while pyspy.dump_one(binary, proc.pid, False, 10.0).threads is None:
            assert time.monotonic() < deadline, "py-spy never read the sleeper"
            time.sleep(0.1)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def installed(tool: str) -> str:
    """The tool's path, installed with apt-get when missing (CI runs as root)."""
    if found := shutil.which(tool):
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{tool} is not installed, and installing it needs root and apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "--no-install-recommends", tool]
    try:
        if subprocess.run(install, env=env, capture_output=True, timeout=600).returncode:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
            subprocess.run(install, env=env, capture_output=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip(f"apt-get install {tool} did not finish in 10 minutes")
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"apt-get could not install {tool}")
    return found


@pytest.fixture
def held_by(request: pytest.FixtureRequest, sleeper: int) -> Iterator[tuple[int, int]]:
    """The sleeper with a real tracer attached (the parameter: its command, PID for the
    sleeper's pid), as (sleeper pid, tracer pid); the tracer is ended afterwards."""
    command = [installed(request.param[0]), *request.param[1:]]
    tracer = subprocess.Popen(
        [str(sleeper) if arg == "PID" else arg for arg in command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while (pyspy.tracer_of(sleeper) or (0,))[0] != tracer.pid:
            if tracer.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"{command[0]} could not attach to the sleeper (no ptrace here?)")
            time.sleep(0.05)
        yield sleeper, tracer.pid
    finally:
        tracer.kill()
        tracer.wait()


def dump(pid: int) -> ToolRun:
    return REGISTRY.run("dump_stacks", {"pids": [pid], "with_locals": False})


def assert_no_permission_gap(reasons: list[str]) -> None:
    """A dump that lost every try to the others says so; none blames permissions."""
    assert not [r for r in reasons if "permission denied" in r], reasons
    assert all("another tracer (py-spy, gdb, strace) holds" in r for r in reasons), reasons


def test_concurrent_dumps_of_one_process_are_no_permission_gap(sleeper: int) -> None:
    REGISTRY.get("dump_stacks")  # imported once, before the threads race to it
    with ThreadPoolExecutor(CONCURRENT) as pool:
        runs = list(pool.map(lambda _: dump(sleeper), range(CONCURRENT)))
    assert_no_permission_gap([gap.reason for run in runs for gap in run.gaps])
    assert any([e.kind for e in run.evidence] == ["stack"] for run in runs)


def test_concurrent_triage_hang_runs_are_no_permission_gap(sleeper: int) -> None:
    command = triage_cli("hang", "--json", "--pids", str(sleeper))
    runs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    reports = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert_no_permission_gap([gap["reason"] for report in reports for gap in report["gaps"]])
    assert any(e["kind"] == "stack" for report in reports for e in report["evidence"])


@pytest.mark.parametrize("held_by", [("strace", "-p", "PID", "-o", os.devnull)], indirect=True)
def test_a_process_strace_holds_is_a_gap_naming_strace(
    held_by: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    pid, tracer = held_by
    monkeypatch.setattr(pyspy, "BUSY_WAIT_S", 0.2)  # strace does not let go: no long wait
    run = dump(pid)
    assert run.evidence == []
    (gap,) = run.gaps
    assert gap.reason == (
        f"pid {pid}: another tracer (py-spy, gdb, strace) holds it: strace (pid {tracer})"
    )
    assert gap.hint is not None and "CAP_SYS_PTRACE" not in gap.hint


@pytest.mark.parametrize(
    "held_by",
    [("gdb", "-nx", "-q", "-batch", "-p", "PID", "-ex", "shell sleep 600")],
    indirect=True,
)
def test_a_process_gdb_stopped_is_read_and_names_gdb(held_by: tuple[int, int]) -> None:
    """gdb stops what it attaches to: py-spy reads it without pausing it."""
    pid, tracer = held_by
    deadline = time.monotonic() + 30
    while not pyspy.is_stopped(pid):
        assert time.monotonic() < deadline, "gdb attached but did not stop the process"
        time.sleep(0.05)
    run = dump(pid)
    assert run.gaps == []
    (stack,) = run.evidence
    assert stack.data["activity"] == "stopped"
    assert f"stopped by its tracer gdb (pid {tracer})" in stack.data["detail"]
