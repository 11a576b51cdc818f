"""The processes a user names, checked before anything runs: a pid that does not exist
or is no Python process is a usage error, not a report of a job that says nothing; a
launcher's pid given as a rank is followed down to its ranks, and a rank's pid given as
the launcher is followed up to its launcher."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

import psutil

from triage.cli.common import UsageError
from triage.readers.processes import (
    RANK_VARIABLES,
    cmdline,
    environ_of,
    is_launcher,
    launcher_of,
    rank_pids,
)


@dataclass
class Processes:
    """The pids and launcher to read, and what was changed from what the user typed."""

    pids: list[int]
    launcher_pid: int | None
    notes: list[str] = field(default_factory=list)


def _argv(pid: int) -> list[str] | None:
    """The process's command line; None when there is no such process."""
    try:
        return cmdline(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return None


def _command(argv: list[str]) -> str:
    return shlex.join(argv)[:60] or "?"


def _is_python(argv: list[str]) -> bool:
    return bool(argv) and "python" in os.path.basename(argv[0]).lower()


def _ranks_under(pid: int, argv: list[str]) -> list[int]:
    """The ranks a launcher (torchrun, mp.spawn's parent, a shell or srun wrapping python)
    runs; none for a process that is a rank itself (its workers are not ranks)."""
    if _is_python(argv) and not is_launcher(argv):
        env = environ_of(pid)
        if any(name in env for name in RANK_VARIABLES):
            return []
    return [rank for rank in rank_pids(pid) if rank != pid]


def _follow_pids(pids: list[int], found: Processes) -> None:
    usable, refused = 0, []
    for pid in pids:
        argv = _argv(pid)
        if argv is None:
            refused.append(f"no process with pid {pid}")
            found.pids.append(pid)  # a rank that exited is evidence beside live peers
            continue
        ranks = _ranks_under(pid, argv)
        if ranks:
            found.notes.append(
                f"pid {pid} is the launcher (`{_command(argv)}`): reading its ranks,"
                f" pids {', '.join(map(str, ranks))}"
            )
            found.pids += [rank for rank in ranks if rank not in found.pids]
            usable += 1
        elif argv and not _is_python(argv):
            refused.append(f"pid {pid} (`{_command(argv)}`) is not a Python process")
            found.pids.append(pid)  # beside ranks, a gap that says so
        else:
            found.pids.append(pid)
            usable += 1
    if refused and not usable and found.launcher_pid is None:
        raise UsageError(
            f"{'; '.join(refused)}: give the ranks' pids (--pids) or their launcher's"
            " (--launcher-pid)"
        )


def _follow_launcher(launcher_pid: int, found: Processes) -> None:
    argv = _argv(launcher_pid)
    if argv is None:
        raise UsageError(f"--launcher-pid: no process with pid {launcher_pid}")
    if _ranks_under(launcher_pid, argv) or not _is_python(argv):
        found.launcher_pid = launcher_pid
        return
    parent = launcher_of(launcher_pid)
    if parent is not None and _ranks_under(parent, _argv(parent) or []):
        found.launcher_pid = parent
        found.notes.append(
            f"pid {launcher_pid} is a rank, not a launcher: reading its launcher, pid {parent}"
        )
        return
    found.pids.append(launcher_pid)
    found.notes.append(
        f"pid {launcher_pid} runs no ranks under it: reading it as a rank (--pids {launcher_pid})"
    )


def resolve_processes(pids: list[int], launcher_pid: int | None) -> Processes:
    """What to read for `--pids` and `--launcher-pid` as typed."""
    found = Processes(pids=[], launcher_pid=None)
    if launcher_pid is not None:
        _follow_launcher(launcher_pid, found)
    _follow_pids(pids, found)
    return found
