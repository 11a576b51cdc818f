"""Folders as evidence stay inside themselves and say what they left out: a link to a file
outside is not followed, an unreadable subfolder or file is a gap that says why, and a
folder with more files than are read keeps the newest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import triage_cli, wait_for_environ
from triage.cli.common import load
from triage.registry import REGISTRY

SECRET_LINE = "[rank0]: NCCL WARN outside-the-root secret line\n"


def collect(*paths: Path) -> tuple[list[str], list[str]]:
    load()
    run = REGISTRY.run("collect_files", {"paths": [str(p) for p in paths]})
    logs = run.context.get("log_files", [])
    return logs, [f"{g.source}: {g.reason}" for g in run.gaps]


def test_a_link_out_of_the_folder_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "home" / ".netrc"
    outside.parent.mkdir()
    outside.write_text(SECRET_LINE)
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    (logs_dir / "rank0.log").write_text("[rank0]: step 1\n")
    (logs_dir / "rank1.log").symlink_to(outside)
    (logs_dir / "inside.log").symlink_to(logs_dir / "rank0.log")  # inside: followed
    logs, gaps = collect(logs_dir)
    assert sorted(Path(p).name for p in logs) == ["inside.log", "rank0.log"]
    assert any("rank1.log: a link to" in gap and "outside" in gap for gap in gaps), gaps


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user may enter (pytest's own are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="triage-perm-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            path.chmod(0o755)
        shutil.rmtree(folder)


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop privileges"
)
def test_unreadable_subfolders_and_files_say_why(shared_dir: Path) -> None:
    locked = shared_dir / "locked"
    locked.mkdir()
    (locked / "rank0.log").write_text("x\n")
    unreadable = shared_dir / "rank1.log"
    unreadable.write_text("x\n")
    (shared_dir / "rank2.log").write_text("[rank2]: step 1\n")
    (shared_dir / "rank2.log").chmod(0o644)
    locked.chmod(0o700)
    unreadable.chmod(0o600)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    done = subprocess.run(
        [*nobody, *triage_cli("tools", "run", "collect_files", f"paths={shared_dir}")],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, HOME="/tmp"),
        check=False,
    )
    gaps = [f"{g['source']}: {g['reason']}" for g in json.loads(done.stdout)["gaps"]]
    assert any("locked: permission denied" in gap for gap in gaps), gaps
    assert any("rank1.log: permission denied" in gap for gap in gaps), gaps


def test_past_the_cap_the_newest_files_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load()
    module = sys.modules[REGISTRY.get("collect_files").func.__module__]  # as the loader named it
    monkeypatch.setattr(module, "MAX_FILES", 3)
    for index in range(6):  # the names sort opposite to their age: z_0 is the newest
        path = tmp_path / f"{'zyxwvu'[index]}_{index}.log"
        path.write_text(f"line {index}\n")
        os.utime(path, (1_000_000 + (6 - index) * 100,) * 2)
    logs, gaps = collect(tmp_path)
    assert sorted(Path(p).name for p in logs) == ["x_2.log", "y_1.log", "z_0.log"]
    assert any("6 files: the newest 3 were read, the 3 oldest were not" in gap for gap in gaps)


def test_a_zombie_rank_is_named_exited_not_sent_to_the_gaps() -> None:
    env = {"PATH": "/usr/bin:/bin", "WORLD_SIZE": "2"}
    live = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], env={**env, "RANK": "0"}
    )
    dead = subprocess.Popen([sys.executable, "-c", "pass"], env={**env, "RANK": "1"})
    try:
        wait_for_environ([live.pid])
        deadline = time.monotonic() + 30
        while psutil.Process(dead.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.02)  # polled: it exits at once, and stays a zombie until reaped
        done = subprocess.run(
            triage_cli("hang", "--pids", str(live.pid), str(dead.pid), "--json"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        live.kill()
        live.wait()
        dead.wait()
    groups = {g["state"]: g for g in json.loads(done.stdout)["rank_groups"]}
    assert groups["exited (zombie)"]["pids"] == [dead.pid], groups  # its environment is gone
    assert groups["no live process"]["ranks"] == [1]
    assert "stack unreadable" not in groups
