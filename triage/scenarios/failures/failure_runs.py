"""Launch a failure scenario the way users do (torchrun with per-rank logs) and keep its output.

Each scenario is one small job script in this folder with one planted fault. This module
starts ``python -m torch.distributed.run`` (or the deprecated ``torch.distributed.launch``)
with ``--redirects 3 --tee 3 --log-dir``, so the output carries torchrun's real ``[rankN]:`` /
``[defaultN]:`` prefixes, its per-rank log folders and its ChildFailedError report. The
launcher's stdout and stderr go to ``console.log`` (as ``torchrun ... 2>&1 | tee`` would),
the per-rank logs under ``logs/``. Only the standard library and psutil are imported here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from triage.scenarios.harness import ScenarioError, die_with_parent_process

FAILURES_DIR = Path(__file__).resolve().parent
CONSOLE_LOG = "console.log"
LOG_DIR = "logs"
#: An interface name copied from an InfiniBand cluster's launch script; absent on test hosts.
MISSING_IFNAME = "ib0"


@dataclass(frozen=True)
class Failure:
    """One planted fault: how to launch it and what a correct diagnosis says.

    ``cause_id`` is the cause the evidence supports best, ``accept`` other causes a careful
    reader could defend from the same text, ``culprits`` the ranks whose own fault it is
    (empty when no rank ran: the launcher failed first). ``shows`` is text each culprit's
    failure prints (the run is only kept when every culprit's output has it); ``located``
    says the culprit's traceback points at the fault line. ``tee`` False launches plain
    torchrun, without ``--redirects/--tee/--log-dir``.
    """

    name: str
    cause_id: str
    culprits: tuple[int, ...]
    shows: str
    nproc: int = 2
    accept: tuple[str, ...] = ()
    launcher: str = "torch.distributed.run"
    env: Mapping[str, str] = field(default_factory=dict)
    hold_master_port: bool = False
    tee: bool = True
    located: bool = False

    @property
    def script(self) -> Path:
        return FAILURES_DIR / f"{self.name}.py"

    def fault_line(self) -> int | None:
        """1-based line of the faulting statement: the one after ``# triage: fault``.

        The marker sits on a line of its own because tracebacks quote the faulting line,
        and the recorded logs should read like any user's.
        """
        for number, line in enumerate(self.script.read_text().splitlines(), start=1):
            if _FAULT_MARKER.match(line):
                return number + 1
        return None


_FAULT_MARKER = re.compile(r"\s*#\s*triage:\s*fault\b")

FAILURES: dict[str, Failure] = {
    f.name: f
    for f in (
        # Rank 1's ValueError comes first; its peers report the closed connection.
        Failure(
            "peer_crash",
            "comm.peer_failure",
            (1,),
            "ValueError: corrupt sample",
            nproc=3,
            accept=("hang.rank_exited",),
            located=True,
        ),
        Failure(
            "ddp_unused_parameters",
            "wrong.unused_parameters",
            (0, 1),
            "Expected to have finished reduction in the prior iteration",
        ),
        Failure(
            "mesh_too_large",
            "config.world_size_mismatch",
            (0, 1),
            "Mesh should not be bigger than default world size",
            located=True,
        ),
        # torchrun's own store cannot listen: no rank ever starts.
        Failure(
            "rendezvous_port_in_use", "comm.rendezvous", (), "EADDRINUSE", hold_master_port=True
        ),
        Failure(
            "missing_interface",
            "comm.wrong_interface",
            (0, 1),
            f"Unable to find address for: {MISSING_IFNAME}",
            env={"GLOO_SOCKET_IFNAME": MISSING_IFNAME},
        ),
        # The logs show timeouts at two call sites (barrier past the loop vs all_reduce) and
        # the step counts each rank printed; a collective timeout is the least a reader sees.
        Failure(
            "uneven_steps",
            "hang.uneven_inputs",
            (2,),
            "Timed out waiting",
            nproc=3,
            accept=("hang.collective_timeout", "hang.mismatched_collective"),
        ),
        # SIGKILL with no word from the rank is the OOM killer's signature, not proof of it.
        Failure(
            "host_oom_kill",
            "oom.host",
            (1,),
            "Signal 9 (SIGKILL) received by PID",
            accept=("hang.rank_exited",),
            tee=False,
        ),
        Failure(
            "launcher_args",
            "config.launcher_args",
            (0, 1),
            "unrecognized arguments: --local-rank",
            launcher="torch.distributed.launch",
        ),
    )
}


@dataclass(frozen=True)
class FailureRun:
    """What one launch left behind."""

    failure: Failure
    out_dir: Path
    command: list[str]
    returncode: int
    seconds: float

    @property
    def console(self) -> Path:
        return self.out_dir / CONSOLE_LOG

    @property
    def log_dir(self) -> Path:
        return self.out_dir / LOG_DIR

    def fault_visible(self) -> bool:
        """Whether the output shows the planted fault from every culprit rank.

        A rank that the launcher tears down a moment before it prints loses its message;
        such a run shows less than the scenario promises and is not worth keeping.
        """
        text = self.console.read_text(errors="replace")
        if self.failure.shows not in text:
            return False
        if not self.failure.tee:
            return True
        lines = text.splitlines()
        return all(
            any(line.startswith(f"[default{r}]:") and self.failure.shows in line for line in lines)
            for r in self.failure.culprits
        )

    def files(self) -> list[Path]:
        """Every file the run wrote, console log first."""
        return [self.console, *sorted(p for p in self.log_dir.rglob("*") if p.is_file())]


def launcher_available(failure: Failure) -> bool:
    """Whether the installed torch still ships the scenario's launcher module.

    Looks for the file instead of importing it: importing would import torch here.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    module = Path(*failure.launcher.split(".")[1:]).with_suffix(".py")
    return any((Path(where) / module).is_file() for where in spec.submodule_search_locations)


@contextlib.contextmanager
def _held_port() -> Iterator[int]:
    """A port a listening socket holds, as a stale job's rendezvous store would."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", 0))
        held.listen()
        yield int(held.getsockname()[1])


def launch_command(failure: Failure, log_dir: Path, port: int | None) -> list[str]:
    """The launcher's command line: ``--standalone`` unless a master port is given."""
    where = (
        ["--master-addr", "127.0.0.1", "--master-port", str(port)]
        if port is not None
        else ["--standalone"]
    )
    logs = ["--redirects", "3", "--tee", "3", "--log-dir", str(log_dir)] if failure.tee else []
    return [
        sys.executable,
        "-m",
        failure.launcher,
        "--nproc-per-node",
        str(failure.nproc),
        *where,
        *logs,
        str(failure.script),
    ]


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a launcher that is still running and every worker it started.

    Workers run in sessions of their own, so they are found as the launcher's children. A
    launcher that exited by itself has already stopped its workers (and its pid may be
    reused), so it is left alone.
    """
    if proc.poll() is not None:
        return
    try:
        launcher = psutil.Process(proc.pid)
        family = [*launcher.children(recursive=True), launcher]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(family, timeout=30)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def run_failure(
    name: str,
    out_dir: str | os.PathLike[str],
    timeout_s: float = 120.0,
    nproc: int | None = None,
) -> FailureRun:
    """Launch scenario ``name`` with its output in ``out_dir``; wait until the job has failed.

    ``nproc`` overrides the scenario's rank count (the culprits must stay below it).

    ScenarioError when the job succeeds or the fault cannot be planted on this host;
    TimeoutError (with the console tail) when it runs past ``timeout_s``. The launcher and
    its workers never outlive this call.
    """
    failure = FAILURES[name]
    if nproc is not None:
        if any(r >= nproc for r in failure.culprits):
            raise ValueError(f"{name} needs more than {nproc} ranks")
        failure = replace(failure, nproc=nproc)
    if not launcher_available(failure):
        raise ScenarioError(f"{name}: this torch does not ship {failure.launcher}")
    if failure.env.get("GLOO_SOCKET_IFNAME") in {n for _, n in socket.if_nameindex()}:
        raise ScenarioError(f"{name}: this host has an interface named {MISSING_IFNAME}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **failure.env)
    with contextlib.ExitStack() as stack:
        port = stack.enter_context(_held_port()) if failure.hold_master_port else None
        console = stack.enter_context((out / CONSOLE_LOG).open("wb"))
        command = launch_command(failure, out / LOG_DIR, port)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=str(out),
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent_process,
        )
        stack.callback(_kill_tree, proc)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TimeoutError(
                f"{name} did not finish within {timeout_s:.0f}s\n{_tail(out / CONSOLE_LOG)}"
            ) from None
        seconds = time.monotonic() - t0
    if returncode == 0:
        raise ScenarioError(f"{name} succeeded; the fault did not fire\n{_tail(out / CONSOLE_LOG)}")
    return FailureRun(failure, out, command, returncode, seconds)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no console log)"
