"""Flight Recorder dumps and NCCL logs of a hung or finished run: asking NCCL for its
dumps through its pipes, waiting for them, and finding what the user's own settings sent
outside the run's folder."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from triage.job.debug_env import PIPE_PREFIX

WAIT_S = 10.0


def trigger_nccl_pipes(fr_dir: Path) -> int:
    """Write to each NCCL dump pipe (ProcessGroupNCCL dumps its recorder and carries on)."""
    written = 0
    for path in sorted(fr_dir.glob(f"{PIPE_PREFIX}*.pipe")):
        try:
            if not stat.S_ISFIFO(path.lstat().st_mode):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when the rank is gone
        except OSError:
            continue
        try:
            os.write(fd, b"1")
            written += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return written


def dumps_since(fr_dir: Path, since: float) -> list[Path]:
    """Dump files written since `since` (hidden files are markers, pipes, partial writes)."""
    found = []
    for path in fr_dir.glob("[!.]*"):
        with contextlib.suppress(OSError):
            if path.is_file() and path.stat().st_mtime >= since:
                found.append(path)
    return found


def wait_for_dumps(fr_dir: Path, count: int, since: float) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(dumps_since(fr_dir, since)) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def outside_files(env: Mapping[str, str], out: Path, since: float) -> list[str]:
    """Dumps and NCCL logs the job wrote where the user's own settings sent them."""
    patterns = []
    for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        if env.get(name):
            patterns.append(env[name] + "*")
    if env.get("NCCL_DEBUG_FILE"):
        patterns.append(env["NCCL_DEBUG_FILE"].replace("%h", "*").replace("%p", "*"))
    found: list[str] = []
    for pattern in patterns:
        where = Path(pattern).absolute()
        if where.parent == out or out in where.parents:
            continue
        for path in sorted(where.parent.glob(where.name)):
            with contextlib.suppress(OSError):
                if path.is_file() and path.stat().st_mtime >= since and str(path) not in found:
                    found.append(str(path))
    return found
