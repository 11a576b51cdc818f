"""Tools on inputs that never end: a FIFO or a device is refused before anything opens
it, on every way in (the registry, MCP, a model's tool call), and a call that still runs
at its deadline comes back as an error instead of blocking."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_mcp import call, server  # noqa: F401  (the server fixture)
from triage.cli.common import load
from triage.llm.config import LlmConfig
from triage.llm.toolbox import ToolBox
from triage.registry import REGISTRY, Registry, ToolOutput


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "rank0.log"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("tool", ["scan_logs", "collect_files", "read_flight_recorder"])
def test_a_fifo_or_a_device_is_refused_unopened(fifo: Path, tool: str) -> None:
    load()
    name = {"scan_logs": "log_files", "collect_files": "paths"}.get(tool, "paths")
    for path in (fifo, Path("/dev/zero")):
        started = time.monotonic()
        run = REGISTRY.run(tool, {name: [str(path)]})
        assert time.monotonic() - started < 10
        assert (
            run.result.error
            == f"{path} is not a regular file (a FIFO, a device or a socket): not read"
        )


def test_a_call_past_its_deadline_is_an_error_not_a_wait() -> None:
    release = threading.Event()

    def stuck() -> ToolOutput:
        """Never returns until released."""
        release.wait()
        return ToolOutput()

    registry = Registry()
    registry.register(stuck, "stuck", "stuck")
    started = time.monotonic()
    run = registry.run("stuck", {}, deadline_s=0.2)
    release.set()
    assert time.monotonic() - started < 5
    assert run.result.error == "did not finish in 0.2 s"


def test_over_mcp_the_fifo_is_a_tool_error(server: Any, fifo: Path) -> None:  # noqa: F811
    result = call(server, "scan_logs", {"log_files": [str(fifo)]})
    assert result.is_error and "not a regular file" in result.content[0].text  # type: ignore[union-attr]


def test_a_models_call_on_the_fifo_is_an_error(fifo: Path) -> None:
    load()
    box = ToolBox(REGISTRY, LlmConfig(), scope=[str(fifo.parent)], pids=[])
    block = {
        "type": "tool_use",
        "id": "t1",
        "name": "scan_logs",
        "input": {"log_files": [str(fifo)]},
    }
    result, _ = box.execute(block)
    assert result["is_error"] and "not a regular file" in result["content"]
