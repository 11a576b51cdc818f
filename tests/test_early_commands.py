"""nvidia-smi's queries started before the CLI's import are taken over, not asked twice."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import triage_cli
from triage.observations import EnvironmentFacts
from triage.readers import early_commands
from triage.registry import REGISTRY

#: Answers like nvidia-smi's and notes each call, one line per query.
FAKE_SMI = """#!/bin/sh
echo "$1" >> "{calls}"
case "$1" in
  --query-gpu=*) printf '0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 3, 81559\\n';;
  --query-compute-apps=*) printf '12345, 00000000:18:00.0, 1024, /usr/bin/python3\\n';;
  topo) {topo};;
esac
"""


def fake_smi(folder: Path, topo: str = "echo GPU0 X") -> Path:
    calls = folder / "calls.txt"
    binary = folder / "nvidia-smi"
    binary.write_text(FAKE_SMI.format(calls=calls, topo=topo))
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return calls


def running(command: str) -> bool:
    """Whether a live (not zombie) process runs exactly `command`."""
    return any(
        p.info["cmdline"] == command.split() and p.info["status"] != psutil.STATUS_ZOMBIE
        for p in psutil.process_iter(["cmdline", "status"])
    )


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    yield tmp_path
    early_commands.discard()


def test_started_queries_are_taken_over_by_the_environment_check(on_path: Path) -> None:
    calls = fake_smi(on_path)
    early_commands.start_smi_queries()
    run = REGISTRY.run("check_environment", {})
    host = EnvironmentFacts.model_validate(run.evidence[0].data)
    assert host.gpus is not None and host.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert host.gpu_processes[0].pid == 12345 and host.topology == "GPU0 X\n"
    assert sorted(calls.read_text().split()) == [
        "--query-compute-apps=pid,gpu_bus_id,used_memory,process_name",
        "--query-gpu=index,name,pci.bus_id,memory.used,memory.total",
        "topo",
    ]


def test_a_query_that_does_not_end_in_time_is_stopped(on_path: Path) -> None:
    fake_smi(on_path, topo="exec sleep 61.25")
    early_commands.start_smi_queries()
    binary = str(on_path / "nvidia-smi")
    assert early_commands.take((binary, "topo", "-m"), timeout_s=0.2) is None
    assert early_commands.take((binary, "topo", "-m"), timeout_s=0.2) is None  # taken once
    code, listing = early_commands.take((binary, *early_commands.SMI_QUERIES[0]), 10) or (1, "")
    assert code == 0 and "H100" in listing
    assert not running("sleep 61.25")  # the stuck one was stopped


def test_what_nobody_takes_is_discarded(on_path: Path) -> None:
    fake_smi(on_path, topo="exec sleep 61.5")
    early_commands.start_smi_queries()
    early_commands.take((str(on_path / "nvidia-smi"), *early_commands.SMI_QUERIES[0]), 10)
    assert running("sleep 61.5")
    early_commands.discard()
    assert not running("sleep 61.5")
    assert early_commands.take((str(on_path / "nvidia-smi"), "topo", "-m"), 1) is None


def test_a_live_hang_asks_nvidia_smi_each_question_once(tmp_path: Path) -> None:
    calls = fake_smi(tmp_path)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        done = subprocess.run(
            triage_cli("hang", "--json", "--pids", str(idle.pid)),
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ | {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"},
            check=False,
        )
    finally:
        idle.kill()
        idle.wait()
    report = json.loads(done.stdout)
    [host] = [
        e for e in report["evidence"] if e["kind"] == "environment" and e["data"]["scope"] == "host"
    ]
    assert host["data"]["gpus"][0]["bus_id"] == "00000000:18:00.0"
    assert len(calls.read_text().split()) == 3
