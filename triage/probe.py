"""In-process Flight Recorder trigger: `import triage.probe` in a training script.

Gloo writes no Flight Recorder dump when a collective hangs, and a hung rank cannot
run a Python signal handler: its main thread sits in C++ (`work.wait()`) and Python
only runs handlers between bytecodes of the main thread. So the handler does nothing
itself. CPython's C-level handler writes the signal number to a wakeup pipe the moment
the signal arrives, whichever thread it lands on; a daemon thread blocked on that pipe
wakes up and takes the dump with torch's own call. The hung collective released the GIL,
so the thread runs while the main thread stays blocked, and the job is left as it was.

On the signal (SIGUSR1 unless `TRIAGE_FR_SIGNAL` names another; `off` skips the
import-time install), the rank writes `torch._C._distributed_c10d._dump_fr_trace(True,
True, False)` (pickle bytes) to `$TRIAGE_FR_DIR/<prefix><rank>` (default
`./triage-fr/nccl_trace_rank_<rank>`, torch's own naming; `TRIAGE_FR_PREFIX` changes it).
With `TRIAGE_FR_DIR` set (`triage run` sets it), installing also writes `.probe-<pid>`
there: the marker tells the runner that this process handles the signal and may be sent
it (a process without a handler would be killed by SIGUSR1). Only the standard library is
imported here; torch is used only if the job itself imported it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

DIR_ENV = "TRIAGE_FR_DIR"
SIGNAL_ENV = "TRIAGE_FR_SIGNAL"
PREFIX_ENV = "TRIAGE_FR_PREFIX"
DEFAULT_DIR = "triage-fr"
DEFAULT_PREFIX = "nccl_trace_rank_"
MARKER_PREFIX = ".probe-"
OWNERSHIP_CHECK_S = 1.0

_lock = threading.Lock()
_installed: Installed | None = None


class Installed:
    """One installation: where dumps go, the signal, and the thread that writes them."""

    def __init__(self, signum: int, directory: Path, prefix: str, forward_fd: int) -> None:
        self.signum = signum
        self.directory = directory
        self.prefix = prefix
        self.forward_fd = forward_fd
        self.handled = 0
        self.owns_signal = True
        self.dumps: list[str] = []
        self.errors: list[str] = []
        self.marker = directory / f"{MARKER_PREFIX}{os.getpid()}"

    def write_marker(self) -> None:
        """Atomically (re)write the marker: pid, signal, signals handled, dumps taken."""
        state = {
            "pid": os.getpid(),
            "signal": self.signum,
            "rank": _rank(),
            "prefix": self.prefix,
            "owns_signal": self.owns_signal,
            "handled": self.handled,
            "dumps": len(self.dumps),
            "last_dump": self.dumps[-1] if self.dumps else None,
            "errors": self.errors[-3:],
        }
        tmp = self.marker.with_name(self.marker.name + ".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, self.marker)


def _rank() -> int | None:
    """The global rank: from torch.distributed when the job initialised it, else RANK."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # a half torn-down group: fall back to the launcher's word
        pass
    value = os.environ.get("RANK", "")
    return int(value) if value.isdigit() else None


def _signal_number(name: str) -> int:
    name = name.strip().upper()
    if name.isdigit():
        return int(name)
    member = getattr(signal.Signals, name if name.startswith("SIG") else f"SIG{name}", None)
    if member is None:
        raise ValueError(f"{SIGNAL_ENV}={name!r} is not a signal name")
    return int(member)


def dump_now() -> Path | None:
    """Write this rank's Flight Recorder dump now; None when torch is not loaded.

    Callable from any thread; the file appears atomically (written aside, then renamed).
    """
    state = _installed
    directory = state.directory if state else Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)
    prefix = state.prefix if state else os.environ.get(PREFIX_ENV, DEFAULT_PREFIX)
    if "torch._C" not in sys.modules:
        return None
    c10d = importlib.import_module("torch._C._distributed_c10d")  # loaded with torch already
    # `_dump_fr_trace` serves every backend; older torch has only the NCCL-specific call.
    dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
    if dump is None:
        raise RuntimeError("this torch has no Flight Recorder dump call")
    data: bytes = dump(True, True, False)
    rank = _rank()
    target = directory / f"{prefix}{rank if rank is not None else f'pid{os.getpid()}'}"
    directory.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


def _serve(state: Installed, read_fd: int) -> None:
    """The dump thread: wake on every signal byte, dump on ours, pass the rest on.

    Once a second it also checks that the job did not take the signal over for itself
    (SLURM requeue handlers use SIGUSR1); the marker then tells the runner not to send it.
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
            if state.owns_signal and signal.getsignal(state.signum) is not _ignore:
                state.owns_signal = False
                _update_marker(state)
            continue
        if not received:
            return
        if state.forward_fd >= 0:  # someone else's wakeup fd was there first
            with contextlib.suppress(OSError):
                os.write(state.forward_fd, received)
        if state.signum not in received:
            continue
        try:
            target = dump_now()
            if target is not None:
                state.dumps.append(str(target))
            else:
                state.errors.append("torch is not loaded: no Flight Recorder to dump")
        except Exception as exc:  # a failed dump must never take the rank down
            state.errors.append(f"{type(exc).__name__}: {exc}"[:300])
        state.handled += 1
        _update_marker(state)


def _update_marker(state: Installed) -> None:
    if state.marker.exists():
        with contextlib.suppress(OSError):
            state.write_marker()


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: only there so the signal no longer terminates the process.

    The dump happens on the probe's thread, woken through the wakeup pipe, so it is taken
    even while the main thread is blocked in C++ and never runs this function.
    """


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) must not wake its parent's dump thread."""
    global _installed
    if _installed is None:
        return
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(_installed.forward_fd)
    _installed = None


def install(
    signum: int | None = None, directory: str | os.PathLike[str] | None = None
) -> Installed:
    """Dump the Flight Recorder on `signum` (default: `$TRIAGE_FR_SIGNAL` or SIGUSR1).

    Idempotent; must run in the main thread (Python only lets it set signal handlers).
    """
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("triage.probe.install() must be called from the main thread")
        if signum is None:
            signum = _signal_number(os.environ.get(SIGNAL_ENV) or "SIGUSR1")
        taken = signal.getsignal(signum)
        if callable(taken) and taken is not _ignore:  # the job's own handler: not ours to take
            raise ValueError(
                f"signal {signum} already has a handler ({taken!r});"
                f" choose another signal with {SIGNAL_ENV}=SIGUSR2"
            )
        chosen = directory or os.environ.get(DIR_ENV)
        folder = Path(chosen or DEFAULT_DIR).absolute()
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the C handler must never block
        signal.signal(signum, _ignore)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        state = Installed(signum, folder, os.environ.get(PREFIX_ENV, DEFAULT_PREFIX), previous)
        threading.Thread(
            target=_serve, args=(state, read_fd), name="triage-probe", daemon=True
        ).start()
        if chosen:  # a runner is listening: tell it this process may be signalled
            folder.mkdir(parents=True, exist_ok=True)
            state.write_marker()
        _installed = state
        os.register_at_fork(after_in_child=_after_fork_in_child)
        return state


def _auto_install() -> None:
    """`import triage.probe` installs, unless disabled or imported off the main thread."""
    if os.environ.get(SIGNAL_ENV, "").strip().lower() in ("off", "0", "none"):
        return
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        install()
    except (OSError, ValueError) as exc:
        print(f"triage.probe: not installed: {exc}", file=sys.stderr)


_auto_install()
