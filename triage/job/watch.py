"""Watching a running job: its rank processes, and whether it stopped making progress.

Stopped means every rank waits on its peers with the same stack, sample after sample, and
the job prints nothing: a job that loops over one all_reduce looks the same at a single
sample, one that keeps printing or moving is not hung.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.job.launch import Job
from triage.observations import RankState
from triage.readers.processes import rank_pids
from triage.registry import REGISTRY

_PEER_WAITS = {"collective", "p2p", "group_setup"}


class StacksUnavailable(Exception):
    """Stacks cannot be read at all (no py-spy, no ptrace): hangs cannot be detected."""


def idle_state(pids: list[int]) -> tuple[Any, ...] | None:
    """Every rank's stack when all of them wait on peers, else None."""
    if not pids:
        return None
    run = REGISTRY.run("dump_stacks", {"pids": pids, "with_locals": False, "timeout_s": 10.0})
    if run.result.status.value == "error":
        raise StacksUnavailable(run.result.error or "py-spy failed")
    denied = [g for g in run.gaps if "permission denied" in g.reason]
    if denied and len(denied) == len(pids):
        raise StacksUnavailable(f"{denied[0].reason} ({denied[0].hint})")
    stacks = {e.source: e.data for e in run.evidence if e.kind == RankState.EVIDENCE_KIND}
    if len(stacks) != len(pids):
        return None
    state = []
    for pid in pids:
        data = stacks.get(f"pid:{pid}")
        if data is None or data.get("activity") not in _PEER_WAITS:
            return None
        frames = tuple((f.get("function"), f.get("file"), f.get("line")) for f in data["frames"])
        state.append((pid, frames))
    return tuple(state)


@dataclass
class Outcome:
    exit_code: int | None = None
    hung_pids: list[int] = field(default_factory=list)
    seconds: float = 0.0


def watch(job: Job, hang_after: float, say: Callable[[str], None]) -> Outcome:
    """Wait for the job to exit, or to stop making progress for `hang_after` seconds.

    Stopped means: at every sample in the window, each rank waits on its peers with the
    same stack as before, and the job printed nothing. A job that loops over one
    all_reduce looks the same at a single sample; one that keeps printing or moving is not
    hung, and sampling about ten times per window makes a chance match unlikely.
    """
    interval = min(max(hang_after / 10, 0.25), 15.0)
    started = time.monotonic()
    window: tuple[tuple[Any, ...], int] | None = None
    since = 0.0
    detect = True
    while True:
        try:
            code = job.proc.wait(timeout=interval)
        except subprocess.TimeoutExpired:
            pass
        else:
            return Outcome(exit_code=code, seconds=time.monotonic() - started)
        if not detect or job.interrupted is not None:
            continue
        pids = rank_pids(job.pid)
        try:
            state = idle_state(pids)
        except StacksUnavailable as exc:
            say(f"hang detection is off: {exc}")
            detect = False
            continue
        if state is None:
            window = None
            continue
        seen = (state, _size(job.log))
        if seen != window:
            window, since = seen, time.monotonic()
        elif time.monotonic() - since >= hang_after:
            return Outcome(hung_pids=pids, seconds=time.monotonic() - started)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
