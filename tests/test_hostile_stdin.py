"""Stdin as evidence (`triage analyze -`): bounded, and never left behind on disk, however
the command ends."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import triage_cli
from triage.pasted import MAX_PASTE_BYTES, spool


def test_spool_stops_at_its_limit_and_says_it_cut(tmp_path: Path) -> None:
    target = tmp_path / "out"
    assert spool(io.BytesIO(b"x" * 100), target, limit=10) is True
    assert target.stat().st_size == 10
    assert spool(io.BytesIO(b"x" * 10), target, limit=10) is False  # exactly full: not cut
    assert spool(io.BytesIO(b"abc"), target, limit=10) is False and target.read_bytes() == b"abc"


def test_endless_stdin_is_cut_answered_and_cleaned_up(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            triage_cli("analyze", "-", "--json"),
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
    assert "Traceback" not in done.stderr
    assert f"only the first {MAX_PASTE_BYTES >> 20} MB of stdin were read" in done.stdout
    assert not list(tmp_path.glob("triage-stdin-*"))


def test_a_terminated_paste_leaves_no_spool(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        triage_cli("analyze", "-"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("NCCL WARN something\n")  # and no end of input: still spooling
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("triage-stdin-*/stdin.log")):
            assert time.monotonic() < deadline, "the spool never appeared"
            time.sleep(0.02)  # polled: the spool is created once the CLI has loaded
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert err == "triage: error: terminated (SIGTERM)\n"
    assert not list(tmp_path.glob("triage-stdin-*"))
