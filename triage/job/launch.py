"""The job's launcher process: started in a session of its own, its output shown live,
the user's signals passed on to it, and its whole tree stopped only when asked."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import IO

import psutil

from triage.job.debug_env import RunError

KILL_GRACE_S = 5.0
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Job:
    """The launcher process, in a session of its own, writing straight into the log file.

    The log is a file rather than a pipe so the job never depends on this process: when
    `triage run` leaves a hung job running, its output keeps going to the same log.
    """

    def __init__(self, command: list[str], env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self.interrupted: int | None = None
        with log.open("ab") as sink:
            try:
                self.proc = subprocess.Popen(
                    command,
                    env=dict(env),
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except FileNotFoundError as exc:
                raise RunError(f"cannot run {command[0]!r}: command not found", 127) from exc
            except PermissionError as exc:
                raise RunError(f"cannot run {command[0]!r}: permission denied", 126) from exc
            except OSError as exc:
                raise RunError(f"cannot run {command[0]!r}: {exc.strerror or exc}", 126) from exc
        self.pid = self.proc.pid

    def forward(self, signum: int, frame: FrameType | None = None) -> None:
        """Pass a signal on to the job's process group, as the terminal would have."""
        self.interrupted = signum
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def kill_tree(self) -> None:
        """TERM, then KILL, every process the job started.

        torchrun starts its workers in sessions of their own, so the tree is found from
        the launcher's children before anything dies (orphans are re-parented away).
        """
        try:
            root = psutil.Process(self.pid)
            family = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            family = []
        for proc in family:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(family, timeout=KILL_GRACE_S)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=KILL_GRACE_S)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_GRACE_S)


@contextlib.contextmanager
def forwarding(job: Job) -> Iterator[None]:
    """Ctrl-C, TERM, HUP and QUIT go to the job (main thread only: Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, job.forward) for signum in _FORWARDED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Tail(threading.Thread):
    """Shows the log live, as `tee` would, while the job writes the file itself."""

    def __init__(self, path: Path, sink: IO[bytes]) -> None:
        super().__init__(name="triage-run-tail", daemon=True)
        self.path = path
        self.sink: IO[bytes] | None = sink
        self._stop_event = threading.Event()

    def run(self) -> None:
        with self.path.open("rb") as log:
            while True:
                chunk = log.read(1 << 16)
                if chunk:
                    self._show(chunk)
                elif self._stop_event.wait(0.1):
                    self._show(log.read())
                    return

    def _show(self, chunk: bytes) -> None:
        if not chunk or self.sink is None:
            return
        try:
            self.sink.write(chunk)
            self.sink.flush()
        except (OSError, ValueError):  # the reader went away (`| head`): stop showing
            self.sink = None

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
