"""`--launcher-pid` finds ranks under real launchers: torchrun and torch.multiprocessing.spawn."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import requires_torch, triage_cli
from triage.scenarios import SCENARIOS, free_port

pytestmark = [pytest.mark.scenario, requires_torch]

SPAWN_JOB = """\
import os
from datetime import timedelta
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=600))
    x = torch.ones(4)
    for step in range(10):
        dist.all_reduce(x)
        if rank == 1 and step == 2:
            dist.broadcast(x, src=1)


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    mp.spawn(worker, args=(3,), nprocs=3)
"""


@pytest.fixture
def launched(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    kind = request.param
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_PORT=str(free_port()))
    if kind == "torchrun":
        script = SCENARIOS["mismatched_collective"]
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "4",
            "--master-port",
            env["MASTER_PORT"],
            str(script),
        ]
    else:
        script = tmp_path / "spawn_job.py"
        script.write_text(SPAWN_JOB)
        cmd = [sys.executable, str(script)]
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield proc
    finally:
        # torchrun starts each worker in a session of its own: kill the whole tree, not a group
        try:
            workers = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            workers = []
        os.killpg(proc.pid, signal.SIGKILL)
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
        proc.wait()
        psutil.wait_procs(workers, timeout=10)


def settled_report(launcher: int, expected: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Poll `triage hang --launcher-pid` until the job has hung: the verdict is the expected
    cause and names the same ranks on two reads in a row (ranks still moving change it)."""
    deadline, last, previous = time.monotonic() + timeout_s, None, None
    while time.monotonic() < deadline:
        done = subprocess.run(
            triage_cli("hang", "--json", "--launcher-pid", str(launcher)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode == 0:
            last = json.loads(done.stdout)
            top = last["hypotheses"][0] if last["hypotheses"] else {}
            verdict = (top.get("cause_id"), top.get("ranks"))
            if verdict[0] == expected and verdict == previous:
                settled: dict[str, Any] = last
                return settled
            previous = verdict
        time.sleep(0.5)
    raise AssertionError(
        f"no stable {expected} verdict in time; last report: {json.dumps(last)[:2000]}"
    )


@pytest.mark.parametrize("launched", ["torchrun"], indirect=True)
def test_torchrun_launcher_pid_finds_every_rank(launched: subprocess.Popen[bytes]) -> None:
    report = settled_report(launched.pid, "hang.mismatched_collective")
    processes = [e["data"] for e in report["evidence"] if e["kind"] == "process"]
    assert sorted(p["rank"] for p in processes) == [0, 1, 2, 3]
    assert {p["launcher"] for p in processes} == {"torchrun"}
    assert report["hypotheses"][0]["ranks"] == [0]


@pytest.mark.parametrize("launched", ["spawn"], indirect=True)
def test_mp_spawn_ranks_come_from_the_spawn_index(launched: subprocess.Popen[bytes]) -> None:
    report = settled_report(launched.pid, "hang.mismatched_collective")
    stacks = [e for e in report["evidence"] if e["kind"] == "stack"]
    assert sorted(e["rank"] for e in stacks) == [0, 1, 2]
    assert report["hypotheses"][0]["ranks"] == [1]
