"""The probe's signalling protocol: the names both sides use, written once.

`triage.probe` (inside the job, standard library only) and the sender (`triage hang
--signal-probe`, `triage run`) import this module; the sender never imports the probe,
whose import installs a signal handler. A rank shows that it may be signalled in one
way only: its probe thread's OS name (/proc/PID/task/*/comm) is `triage-probe<N>`, N the
signal it owns, or `triage-probe-x` once the job took that signal over for itself.
"""

from __future__ import annotations

#: Where the probe writes Flight Recorder dumps on the signal, and their file prefix.
FR_DIR_ENV = "TRIAGE_FR_DIR"
DEFAULT_FR_DIR = "triage-fr"
FR_PREFIX_ENV = "TRIAGE_FR_PREFIX"
#: torch's own default name for Flight Recorder dump files; the probe writes the same.
DEFAULT_FR_PREFIX = "nccl_trace_rank_"
#: The signal the probe listens on (a name or number; `off` skips the import-time install).
SIGNAL_ENV = "TRIAGE_FR_SIGNAL"
#: Where snapshots go, relative to the rank's working directory unless absolute.
DUMP_DIR_ENV = "TRIAGE_DUMP_DIR"
DEFAULT_DUMP_DIR = "triage-dumps"
SNAPSHOT_PREFIX = "triage-probe-"
THREAD_NAME = "triage-probe"
#: The thread's name once the job installed its own handler for the probe's signal.
THREAD_NAME_OFF = f"{THREAD_NAME}-x"
#: The port on which the probe starts PyTorch's debug server in every rank (`triage run
#: --debug-server-port`); unset, none is started.
DEBUG_SERVER_PORT_ENV = "TRIAGE_DEBUG_SERVER_PORT"


def thread_name(signum: int, owns_signal: bool) -> str:
    """The probe thread's OS name: which signal it owns, or that it owns none."""
    return f"{THREAD_NAME}{signum}" if owns_signal else THREAD_NAME_OFF


def signal_of(name: str) -> int | None:
    """The signal a thread named `name` owns; None when it is no probe's or owns none."""
    suffix = name[len(THREAD_NAME) :] if name.startswith(THREAD_NAME) else ""
    return int(suffix) if suffix.isdigit() else None


def snapshot_name(rank: int | str, call: int, pid: int, suffix: str = ".json") -> str:
    """`triage-probe-rank{rank}-call{call:04d}-pid{pid}.json`: the pid lets the sender tell
    a rank's new snapshots from older ones in a shared folder."""
    return f"{SNAPSHOT_PREFIX}rank{rank}-call{call:04d}-pid{pid}{suffix}"


def snapshot_glob(pid: int) -> str:
    """The names of one process's snapshots, for a folder's glob."""
    return f"{SNAPSHOT_PREFIX}rank*-pid{pid}.json"
