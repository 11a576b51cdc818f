"""The scenario harness: real gloo jobs that hang where their markers say, and never leak."""

from __future__ import annotations

import gc
import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

from triage.scenarios import (
    CULPRITS,
    DEFAULT_WORLD_SIZE,
    EXPECTED_EXITED,
    SCENARIOS,
    RankJob,
    exiting_ranks,
    main_thread,
    pid_alive,
    roles,
)


def _cannot_run_jobs() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[torch]')"
    try:
        from triage.scenarios import py_spy_path

        py_spy_path()
    except FileNotFoundError:
        return "py-spy is not installed"
    if os.geteuid() != 0:
        try:
            scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
        except OSError:
            scope = "0"
        if scope != "0":
            return "py-spy cannot attach (not root and kernel.yama.ptrace_scope != 0)"
    return None


needs_jobs = pytest.mark.skipif(_cannot_run_jobs() is not None, reason=str(_cannot_run_jobs()))


# -- no torch needed ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scripts_carry_markers(name: str) -> None:
    job = RankJob(name)
    text = job.script.read_text()
    assert "TRIAGE-SCENARIO: armed" in text
    for marker in ("fault", "wait"):
        assert len(re.findall(rf"#\s*triage:\s*{marker}\b", text)) == 1, marker
        line = text.splitlines()[job.marker_line(marker) - 1]
        assert "dist." in line or "sleep" in line or "raise" in line, line
    assert set(roles(name)) == set(range(DEFAULT_WORLD_SIZE[name]))
    assert CULPRITS[name] and EXPECTED_EXITED[name] <= CULPRITS[name]
    with pytest.raises(ValueError):
        job.marker_line("no-such-marker")


def test_unknown_scenario() -> None:
    with pytest.raises(FileNotFoundError):
        RankJob("no_such_scenario")


# -- real jobs -----------------------------------------------------------------------------


@pytest.mark.scenario
@needs_jobs
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_hangs_where_marked(name: str) -> None:
    with RankJob(name) as job:
        dumps = job.wait_until_stalled(timeout_s=120)
        pids = list(job.pids)
        expected_dead = exiting_ranks(name, job.world_size)
        assert set(job.exited_ranks()) == expected_dead
        assert set(dumps) == set(range(job.world_size)) - expected_dead
        for rank in dumps:
            assert pid_alive(pids[rank])
        where = roles(name, job.world_size)
        for rank, threads in dumps.items():
            thread = main_thread(threads, pids[rank])
            assert thread is not None
            in_script = [f for f in thread["frames"] if f["filename"] == str(job.script)]
            assert in_script, f"rank {rank}: no frame in {job.script}"
            assert in_script[0]["line"] == job.marker_line(where[rank]), (rank, in_script[0])
        log_dir = job.log_dir
    assert not any(pid_alive(p) for p in pids)
    assert not log_dir.exists()  # a temporary log dir is removed


@pytest.mark.scenario
@needs_jobs
def test_cleanup_when_body_raises(tmp_path: Path) -> None:
    pids: list[int] = []
    with (
        pytest.raises(RuntimeError, match="boom"),
        RankJob("p2p_deadlock", log_dir=tmp_path) as job,
    ):
        pids = list(job.pids)
        job.wait_until_stalled(timeout_s=120)
        assert all(pid_alive(p) for p in pids)
        raise RuntimeError("boom")
    assert len(pids) == 2
    assert not any(pid_alive(p) for p in pids)
    assert "TRIAGE-SCENARIO: armed" in (tmp_path / "rank0.log").read_text()  # kept: ours


@pytest.mark.scenario
@needs_jobs
def test_finalizer_kills_forgotten_job() -> None:
    job = RankJob("p2p_deadlock").start()
    pids, log_dir = list(job.pids), job.log_dir
    assert all(pid_alive(p) for p in pids)
    del job
    gc.collect()
    assert not any(pid_alive(p) for p in pids)
    shutil.rmtree(log_dir, ignore_errors=True)
