"""A newcomer's mistakes: each is one line on stderr and exit 2, with no report; what the
tool can work out (a launcher's pid given as a rank's, one symptom's other spellings) it
works out and says so."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import triage_cli

FIXTURES = Path(__file__).parent / "fixtures"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        triage_cli(*args), capture_output=True, text=True, timeout=120, check=False
    )


def assert_usage_error(done: subprocess.CompletedProcess[str], says: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("triage: error: ") and says in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_version_and_short_help() -> None:
    version = run("--version")
    assert version.returncode == 0 and re.fullmatch(r"triage \S+\n", version.stdout)
    for args in (["-h"], ["hang", "-h"], ["tools", "run", "-h"]):
        done = run(*args)
        assert done.returncode == 0 and "Usage: triage" in done.stdout


@pytest.mark.parametrize("command", ["hang", "analyze", "run", "chat", "collect", "tools run"])
def test_help_has_no_type_tags_and_clean_usage(command: str) -> None:
    done = run(*command.split(), "--help")
    assert done.returncode == 0
    assert not re.search(r"<(list\[|bool|str|int|float)", done.stdout), done.stdout
    usage = next(line for line in done.stdout.splitlines() if "Usage:" in line)
    assert "[[" not in usage and "]..." not in usage, usage


def test_a_pid_that_does_not_exist_is_a_usage_error() -> None:
    assert_usage_error(run("hang", "--pids", "4198625"), "no process with pid 4198625")


def test_a_process_that_is_not_python_is_a_usage_error() -> None:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        done = run("hang", "--pids", str(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert_usage_error(done, f"pid {proc.pid} (`sleep 600`) is not a Python process")


def test_a_missing_path_is_a_usage_error() -> None:
    assert_usage_error(run("analyze", "/nonexistent"), "no such file or folder: /nonexistent")
    assert_usage_error(run("hang", "--logs", "/nonexistent"), "no such file or folder")


def test_two_formats_at_once_is_a_usage_error() -> None:
    logs = str(FIXTURES / "logs" / "uneven_steps")
    assert_usage_error(run("hang", "--json", "--format", "markdown", "--logs", logs), "choose one")


def test_one_name_per_symptom_and_the_old_spellings_as_aliases() -> None:
    logs = str(FIXTURES / "logs" / "uneven_steps")
    for spelling in ("comm-error", "comm", "comm_error"):
        done = run("analyze", logs, "--symptom", spelling, "--json")
        report = json.loads(done.stdout)
        assert (report["symptom"], report["playbook"]) == ("comm-error", "comm-error")
    assert_usage_error(run("analyze", logs, "--symptom", "bogus"), "unknown symptom 'bogus'")
    for name in ("comm-error", "comm_error", "wrong-results", "wrong"):
        assert run("playbooks", "show", name).returncode == 0


def test_pids_after_paths_are_pids(sleeping_ranks: list[int]) -> None:
    logs = str(FIXTURES / "logs" / "uneven_steps")
    first, second = sleeping_ranks
    done = run("analyze", logs, "--pids", str(first), str(second), "--json")
    report = json.loads(done.stdout)
    assert report["targets"]["paths"] == [logs]
    assert report["targets"]["pids"] == [first, second]


def test_one_pid_where_a_list_is_expected() -> None:
    done = run("tools", "run", "discover_ranks", f"pids={os.getpid()}")
    payload = json.loads(done.stdout)
    assert payload["result"]["status"] == "ok", done.stderr
    assert os.getpid() in [e["data"].get("pid") for e in payload["evidence"]]


SPAWNER = """
import multiprocessing as mp, os, sys, time

def rank():
    time.sleep(600)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    children = []
    for r in range(2):
        os.environ.update(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r))
        child = ctx.Process(target=rank)
        child.start()
        children.append(child)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        del os.environ[var]
    print(" ".join(str(c.pid) for c in children), flush=True)
    time.sleep(600)
"""


@pytest.fixture
def spawned_job(tmp_path: Path) -> Iterator[tuple[int, list[int]]]:
    """A parent that started two ranks (RANK 0 and 1) with multiprocessing's spawn."""
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        ranks = [int(pid) for pid in parent.stdout.readline().split()]
        yield parent.pid, ranks
    finally:
        for proc in psutil.Process(parent.pid).children(recursive=True):
            proc.kill()
        parent.kill()
        parent.wait()


@pytest.fixture
def sleeping_ranks() -> Iterator[list[int]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            env={"RANK": str(r), "WORLD_SIZE": "2", "PATH": "/usr/bin:/bin"},
        )
        for r in range(2)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _ranks_read(report: dict[str, object]) -> list[int]:
    groups = report["rank_groups"]
    assert isinstance(groups, list)
    return sorted(rank for group in groups for rank in group["ranks"])


def test_a_launcher_pid_given_as_a_rank_is_followed_to_its_ranks(
    spawned_job: tuple[int, list[int]],
) -> None:
    parent, ranks = spawned_job
    done = run("hang", "--pids", str(parent), "--json", "--timeout", "20")
    assert f"pid {parent} is the launcher" in done.stderr
    report = json.loads(done.stdout)
    assert sorted(report["targets"]["pids"]) == sorted(ranks)
    assert _ranks_read(report) == [0, 1]
    by_rank = {int(r): pid for g in report["rank_groups"] for r, pid in g["rank_pids"].items()}
    assert sorted(by_rank.values()) == sorted(ranks)  # each group says which process is which


def test_a_rank_pid_given_as_the_launcher_is_followed_to_its_launcher(
    spawned_job: tuple[int, list[int]],
) -> None:
    parent, ranks = spawned_job
    deadline = time.monotonic() + 30
    while "RANK" not in psutil.Process(ranks[1]).environ() and time.monotonic() < deadline:
        time.sleep(0.05)  # polled: the child's environment is readable once it has started
    done = run("hang", "--launcher-pid", str(ranks[1]), "--json", "--timeout", "20")
    assert f"pid {ranks[1]} is a rank, not a launcher: reading its launcher, pid {parent}" in (
        done.stderr
    )
    assert _ranks_read(json.loads(done.stdout)) == [0, 1]


def test_mcp_without_its_sdk_says_how_to_install_it(tmp_path: Path) -> None:
    # the extra's packages, hidden as if never installed
    hide = tmp_path / "sitecustomize.py"
    hide.write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mcp' or name.startswith('mcp.') or name == 'anyio':\n"
        "            raise ModuleNotFoundError(name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run(
        triage_cli("mcp"), capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.returncode == 1
    assert (
        done.stderr == "triage: error: `triage mcp` needs the MCP SDK: pip install 'triage[mcp]'\n"
    )
