"""`triage hang --debug-server`: every rank through PyTorch's debug server, on a real hung
gloo job whose ranks started it (every rank calls `start_debug_server` through triage.probe,
as `triage run --debug-server-port` asks them to), compared with `--pids` on the same job.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, requires_torch, triage_cli
from triage.job.debug_env import job_environment, torch_version
from triage.job.probe_protocol import DEBUG_SERVER_PORT_ENV
from triage.readers.debug_server import DebugServer
from triage.scenarios import RankJob, free_port

JOB = REPO / "tests" / "jobs" / "skipped_collective.py"
WORLD = 3
NEEDS = ("tabulate", "requests", "aiohttp", "jinja2")
requires_debug_server = pytest.mark.skipif(
    (torch_version() or (0, 0)) < (2, 10)
    or any(importlib.util.find_spec(m) is None for m in NEEDS),
    reason="needs torch 2.10+ and the debug-server extra (tabulate, requests, aiohttp, Jinja2)",
)


def _registered(port: int) -> int:
    """How many ranks' workers the frontend lists (0 while it is not up)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/tcpstore", timeout=2) as page:
            return int(page.read().decode("utf-8", "replace").count("debug_server/rank"))
    except OSError:
        return 0


def _hang(*args: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    done = subprocess.run(
        triage_cli("hang", "--json", *args), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report, time.monotonic() - started


@pytest.fixture(scope="module")
def job() -> Iterator[tuple[RankJob, int]]:
    port = free_port()
    with RankJob(JOB, world_size=WORLD, env={DEBUG_SERVER_PORT_ENV: str(port)}) as running:
        running.wait_until_stalled(timeout_s=120)
        deadline = time.monotonic() + 60
        while _registered(port) < WORLD:
            assert time.monotonic() < deadline, running.logs_tail()
            time.sleep(0.2)
        yield running, port


def _verdict(report: dict[str, Any]) -> tuple[str, list[int], tuple[str, int]]:
    top = report["hypotheses"][0]
    return top["cause_id"], top["ranks"], (top["location"]["file"], top["location"]["line"])


@pytest.mark.scenario
@requires_torch
@requires_debug_server
def test_debug_server_gives_the_verdict_of_pids(job: tuple[RankJob, int]) -> None:
    running, port = job
    served, served_s = _hang("--debug-server", f"127.0.0.1:{port}")
    live, live_s = _hang("--pids", *map(str, running.pids))
    print(f"--debug-server {served_s:.2f}s, --pids {live_s:.2f}s")
    call = (str(JOB), running.marker_line("wait"))
    assert _verdict(served) == _verdict(live) == ("hang.mismatched_collective", [2], call)
    groups = [(g["state"], g["ranks"]) for g in served["rank_groups"]]
    assert groups == [(g["state"], g["ranks"]) for g in live["rank_groups"]]
    stacks = [e for e in served["evidence"] if e["kind"] == "stack"]
    assert sorted(e["rank"] for e in stacks) == list(range(WORLD))
    assert all(e["source"].endswith("/handler/dump_traceback") for e in stacks)
    assert any(e["kind"] == "fr_overview" for e in served["evidence"])
    assert not [g for g in served["gaps"] if g["tool"] == "read_debug_server"]


@pytest.mark.scenario
@requires_torch
@requires_debug_server
def test_a_worker_out_of_reach_is_read_through_the_frontend(job: tuple[RankJob, int]) -> None:
    _, port = job
    server = DebugServer("127.0.0.1", port, 20.0)
    workers = server.workers() | {1: f"http://127.0.0.1:{free_port()}"}  # nothing listens
    replies = server.ask(workers, ["dump_traceback"])
    assert all(replies[(r, "dump_traceback")].body for r in range(WORLD))
    assert str(JOB).encode() in (replies[(1, "dump_traceback")].body or b"")


@pytest.mark.scenario
@requires_torch
@requires_debug_server
def test_a_rank_that_does_not_answer_is_a_gap_not_an_exit(job: tuple[RankJob, int]) -> None:
    running, port = job
    os.kill(running.pids[1], signal.SIGSTOP)  # its worker thread stops with it
    try:
        report, _ = _hang("--debug-server", f"127.0.0.1:{port}", "--timeout", "2")
    finally:
        os.kill(running.pids[1], signal.SIGCONT)
    gaps = [g for g in report["gaps"] if g["source"].startswith("rank 1 (")]
    assert gaps and "no answer within 2s" in gaps[0]["reason"], report["gaps"]
    stacks = {e["rank"] for e in report["evidence"] if e["kind"] == "stack"}
    assert stacks == {0, 2}
    assert not [e for e in report["evidence"] if e["kind"] == "missing_rank"]
    assert "no live process" not in {g["state"] for g in report["rank_groups"]}


def test_nothing_listening_is_one_line_and_quick() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = subprocess.run(
        triage_cli("hang", "--debug-server", address), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"triage: error: no evidence could be gathered: read_debug_server: nothing answers at"
        f" {address}: cannot connect: Connection refused"
    ]
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("value", ["nonsense", "host:", ":80", "host:70000", "a b:1"])
def test_a_malformed_address_is_a_usage_error(value: str) -> None:
    done = subprocess.run(
        triage_cli("hang", "--debug-server", value), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith("triage: error: --debug-server: expected HOST:PORT")
    assert len(done.stderr.strip().splitlines()) == 1


def test_triage_run_asks_the_probe_for_the_server_only_when_told(tmp_path: Path) -> None:
    assert DEBUG_SERVER_PORT_ENV not in job_environment({}, tmp_path, False).env
    asked = job_environment({}, tmp_path, False, debug_server_port=25999)
    assert asked.env[DEBUG_SERVER_PORT_ENV] == "25999"
