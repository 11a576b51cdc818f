"""A file name that is not UTF-8 (`rank3_\\xff.log`): the file is read, and every output
shows the byte as `\\xff` instead of failing (JSON, markdown, HTML, the terminal, MCP)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import triage_cli
from tests.test_mcp import call, server  # noqa: F401  (the server fixture)
from triage.mcp_server import REPORT_TOOL

NCCL_ERROR = (
    "[rank3]:torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
    "c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for"
    " details), NCCL version 2.19.3\n"
)


@pytest.fixture
def odd_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / os.fsdecode(b"rank3_\xff.log")).write_text(NCCL_ERROR)
    return folder


def sources(report: dict[str, Any]) -> str:
    return "\n".join(item["source"] for item in report["evidence"])


@pytest.mark.parametrize("fmt", ["json", "markdown", "html", "terminal"])
def test_every_format_prints_the_name(odd_folder: Path, fmt: str) -> None:
    done = subprocess.run(
        triage_cli("analyze", str(odd_folder), "--format", fmt),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")  # strict: every byte printed is UTF-8
    assert r"rank3_\xff.log" in (sources(json.loads(out)) if fmt == "json" else out)


def test_mcp_answers_and_lives_on(server: Any, odd_folder: Path) -> None:  # noqa: F811
    result = call(server, REPORT_TOOL, {"paths": [str(odd_folder)]})
    assert not result.is_error
    assert result.structured_content is not None
    assert r"rank3_\xff.log" in sources(result.structured_content)
    again = call(server, REPORT_TOOL, {"paths": [str(odd_folder)]})
    assert not again.is_error
