"""Escape sequences in a file name or a log line (colours, an OSC 52 clipboard write)
reach no terminal and no ticket raw: every text output shows them as `\\x1b`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import triage_cli

OSC52 = "\x1b]52;c;aGVsbG8=\x07"  # writes "hello" into the clipboard of the terminal showing it
CSI = "\x9b31m"  # the one-byte C1 CSI: red


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "rank0\x1b]0;pwned\x07.log").write_text(
        f"[rank0]: NCCL WARN {OSC52} shared memory {CSI}full\n"
        "[rank0]:torch.distributed.DistBackendError: NCCL error: unhandled system error\n"
    )
    return folder


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_no_control_sequence_from_the_evidence_is_printed(hostile: Path, fmt: str) -> None:
    env = dict(os.environ, FORCE_COLOR="1", COLUMNS="120")  # rich's own colours stay on
    done = subprocess.run(
        triage_cli("analyze", str(hostile), "--format", fmt),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b]" not in done.stdout and "\x9b" not in done.stdout and "\x07" not in done.stdout
    assert "\\x1b]52;c;aGVsbG8=" in done.stdout  # shown, not sent
    if fmt != "terminal":  # a ticket holds no escape at all
        assert "\x1b" not in done.stdout
