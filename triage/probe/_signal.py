"""The signal path: dump the Flight Recorder, and snapshot, while the main thread is blocked.

A hung rank cannot run a Python signal handler: its main thread sits in C++
(`work.wait()`) and Python only runs handlers between bytecodes of the main thread. So
the handler does nothing itself. CPython's C-level handler writes the signal number to a
wakeup pipe the moment the signal arrives, whichever thread it lands on; a daemon thread
blocked on that pipe wakes up and does the work. The hung collective released the GIL, so
the thread runs while the main thread stays blocked, and the job is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal as signals
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from triage.job.probe_protocol import SIGNAL_ENV, THREAD_NAME, thread_name
from triage.probe import _snapshot
from triage.probe._common import (
    DEFAULT_DIR,
    DEFAULT_PREFIX,
    DIR_ENV,
    PREFIX_ENV,
    dump_dir,
    flight_recorder_bytes,
    loaded,
    rank,
    write_atomic,
)
from triage.probe._debug_server import serve_debug

OWNERSHIP_CHECK_S = 1.0
#: `TRIAGE_FR_SIGNAL` values that turn the import-time install off.
OFF = frozenset({"off", "0", "none"})

_lock = threading.Lock()
_installed: Installed | None = None


class Installed:
    """One installation: the signal, where files go, the model to snapshot, and the thread."""

    def __init__(self, signum: int, directory: Path, prefix: str, forward_fd: int) -> None:
        self.signum = signum
        self.directory = directory
        self.prefix = prefix
        self.forward_fd = forward_fd
        self.dump_dir: Path | None = None
        self.model: Any = None
        self.optimizer: Any = None
        self.handled = 0
        self.owns_signal = True
        self.dumps: list[str] = []
        self.snapshots: list[str] = []
        self.errors: list[str] = []
        self.native_id: int | None = None
        self.os_name: str | None = None


def signal_number(name: str) -> int:
    name = name.strip().upper()
    if name.isdigit():
        return int(name)
    member = getattr(signals.Signals, name if name.startswith("SIG") else f"SIG{name}", None)
    if member is None:
        raise ValueError(f"{SIGNAL_ENV}={name!r} is not a signal name")
    return int(member)


def dump_now() -> Path | None:
    """Write this rank's Flight Recorder dump to `$TRIAGE_FR_DIR` now; None without torch.

    Callable from any thread; the file appears atomically (written aside, then renamed).
    """
    state = _installed
    directory = state.directory if state else Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)
    prefix = state.prefix if state else os.environ.get(PREFIX_ENV, DEFAULT_PREFIX)
    data = flight_recorder_bytes()
    if data is None:
        return None
    who = rank()
    return write_atomic(
        directory / f"{prefix}{who if who is not None else f'pid{os.getpid()}'}", data
    )


def _name_thread(state: Installed) -> None:
    """Show the signal in the probe thread's OS name (`triage-probe10` for SIGUSR1), so a
    sender reads from /proc/PID/task/*/comm which signal is the probe's, and whether it
    still is (Linux; elsewhere nothing happens)."""
    name = thread_name(state.signum, state.owns_signal)
    if state.native_id is None or name == state.os_name:
        return
    with contextlib.suppress(OSError):
        Path(f"/proc/self/task/{state.native_id}/comm").write_text(name)
        state.os_name = name


def _on_signal(state: Installed) -> None:
    """The work of one signal: the recorder to $TRIAGE_FR_DIR, then a snapshot that
    points at that dump (one dump per signal: readers never see a rank twice)."""
    target = None
    try:
        target = dump_now()
        if target is not None:
            state.dumps.append(str(target))
        else:
            state.errors.append("torch is not loaded: no Flight Recorder to dump")
    except Exception as exc:  # a failed dump must never take the rank down
        state.errors.append(f"{type(exc).__name__}: {exc}"[:300])
    if loaded("torch") is not None:  # without torch there is nothing in-process to see
        written = _snapshot.take(
            state.model,
            state.optimizer,
            reason="signal",
            directory=state.dump_dir,
            flight_recorder=target or False,
        )
        if written is not None:
            state.snapshots.append(str(written))


def _serve(state: Installed, read_fd: int) -> None:
    """The probe thread: wake on every signal byte, act on ours, pass the rest on.

    Once a second it also checks that the job did not take the signal over for itself
    (SLURM requeue handlers use SIGUSR1); the thread's OS name then tells senders not to
    send it.
    """
    while True:
        try:
            ready, _, _ = select.select([read_fd], [], [], OWNERSHIP_CHECK_S)
            received = os.read(read_fd, 512) if ready else b""
        except InterruptedError:
            continue
        except OSError:
            return
        if not ready:
            owned = signals.getsignal(state.signum) is _ignore
            state.owns_signal = owned
            _name_thread(state)
            continue
        if not received:
            return
        if state.forward_fd >= 0:  # someone else's wakeup fd was there first
            with contextlib.suppress(OSError):
                os.write(state.forward_fd, received)
        if state.signum not in received:
            continue
        _on_signal(state)
        state.handled += 1


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: only there so the signal no longer terminates the process.

    The work happens on the probe's thread, woken through the wakeup pipe, so it is done
    even while the main thread is blocked in C++ and never runs this function.
    """


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) must not wake its parent's probe thread."""
    global _installed
    if _installed is None:
        return
    with contextlib.suppress(ValueError, OSError):
        signals.set_wakeup_fd(_installed.forward_fd)
    _installed = None


def _check_free(signum: int) -> None:
    taken = signals.getsignal(signum)
    if callable(taken) and taken is not _ignore:  # the job's own handler: not ours to take
        raise ValueError(
            f"signal {signum} already has a handler ({taken!r});"
            f" choose another signal with {SIGNAL_ENV}=SIGUSR2"
        )


def _move(state: Installed, signum: int) -> None:
    """Listen on another signal; the old one gets its default action back."""
    _check_free(signum)
    signals.signal(signum, _ignore)
    if signals.getsignal(state.signum) is _ignore:
        signals.signal(state.signum, signals.SIG_DFL)
    state.signum = signum
    state.owns_signal = True
    _name_thread(state)


def install(
    model: Any = None,
    optimizer: Any = None,
    signal: int | None = None,
    directory: str | os.PathLike[str] | None = None,
    debug_server_port: int | None = None,
) -> Installed:
    """On `signal` (default: `$TRIAGE_FR_SIGNAL` or SIGUSR1) dump the Flight Recorder to
    `$TRIAGE_FR_DIR` and write a snapshot (reason "signal") of `model` and `optimizer` to
    `directory` (default `$TRIAGE_DUMP_DIR` or ./triage-dumps). `debug_server_port` also
    starts PyTorch's debug server on that port once the process group exists (opt-in, for
    trusted networks: `triage hang --debug-server MASTER_ADDR:PORT` reads it).

    Idempotent: a later call (after the import-time install) attaches the model, the
    optimizer, the folder or another signal to the same thread. The first install and a
    change of signal must run in the main thread (Python only lets it set handlers).
    """
    with _lock:
        state = _installed
        sets_handler = state is None or (signal is not None and signal != state.signum)
        if sets_handler and threading.current_thread() is not threading.main_thread():
            raise RuntimeError("triage.probe.install() must be called from the main thread")
        if state is None:
            chosen = os.environ.get(SIGNAL_ENV, "").strip()
            default = chosen if chosen and chosen.lower() not in OFF else "SIGUSR1"
            state = _start(signal_number(default) if signal is None else signal)
        elif signal is not None and signal != state.signum:
            _move(state, signal)
        if model is not None:
            state.model = model
        if optimizer is not None:
            state.optimizer = optimizer
        if directory is not None:
            state.dump_dir = dump_dir(directory)
    if debug_server_port is not None:
        serve_debug(debug_server_port)
    return state


def _start(signum: int) -> Installed:
    global _installed
    _check_free(signum)
    folder = Path(os.environ.get(DIR_ENV) or DEFAULT_DIR).absolute()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # the C handler must never block
    signals.signal(signum, _ignore)
    previous = signals.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    state = Installed(signum, folder, os.environ.get(PREFIX_ENV, DEFAULT_PREFIX), previous)
    thread = threading.Thread(target=_serve, args=(state, read_fd), name=THREAD_NAME, daemon=True)
    thread.start()
    state.native_id = thread.native_id
    _name_thread(state)
    _installed = state
    os.register_at_fork(after_in_child=_after_fork_in_child)
    return state


def installed() -> Installed | None:
    """The current installation, if any."""
    return _installed


def auto_install() -> None:
    """`import triage.probe` installs, unless disabled or imported off the main thread."""
    if os.environ.get(SIGNAL_ENV, "").strip().lower() in OFF:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        install()
    except (OSError, ValueError) as exc:
        print(f"triage.probe: not installed: {exc}", file=sys.stderr)
