"""Launch a scenario job as separate rank processes, wait until it stalls, always clean up.

Only the standard library and psutil are imported here; torch runs inside the job scripts,
which are started as subprocesses (one per rank, like a hand-rolled launcher, not torchrun,
so a rank that dies leaves its peers waiting instead of being torn down).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psutil

from triage.readers import pyspy

JOBS_DIR = Path(__file__).resolve().parent / "jobs"
ARMED_LINE = "TRIAGE-SCENARIO: armed"

#: Scenario name -> job script. One script per hang cause (cause ID ``hang.<name>``).
SCENARIOS: dict[str, Path] = {
    name: JOBS_DIR / f"{name}.py"
    for name in (
        "mismatched_collective",
        "rank_not_in_collective",
        "rank_exited",
        "uneven_inputs",
        "p2p_deadlock",
        "subgroup_mismatch",
    )
}

#: World size each scenario is launched with unless told otherwise.
DEFAULT_WORLD_SIZE: dict[str, int] = {
    "mismatched_collective": 4,
    "rank_not_in_collective": 4,
    "rank_exited": 4,
    "uneven_inputs": 4,
    "p2p_deadlock": 2,
    "subgroup_mismatch": 4,
}


def roles(name: str, world_size: int | None = None) -> dict[int, str]:
    """rank -> the marker (``fault`` or ``wait``) of the script line where that rank ends up.

    A rank that exits on purpose (see :func:`exiting_ranks`) is listed at the line it exits
    from. Ground truth for tests: the innermost frame in the job script of a hung rank is at
    ``marker_line(roles(name)[rank])``.
    """
    ws = world_size or DEFAULT_WORLD_SIZE[name]
    at_fault: set[int] = {
        "mismatched_collective": {0},
        "rank_not_in_collective": {min(2, ws - 1)},
        "rank_exited": {ws - 1},
        "uneven_inputs": {ws - 1},
        "p2p_deadlock": set(range(0, ws, 2)),
        "subgroup_mismatch": set(range(1, ws - 1)),
    }[name]
    return {r: "fault" if r in at_fault else "wait" for r in range(ws)}


def culprits(name: str, world_size: int | None = None) -> frozenset[int]:
    """The ranks a correct diagnosis blames: the one(s) the others wait for.

    mismatched_collective: the rank in the extra collective; rank_not_in_collective: the rank
    outside any collective; rank_exited: the dead rank; uneven_inputs: the rank past the loop;
    p2p_deadlock: every rank (each waits in recv for its peer); subgroup_mismatch: the group
    member that never called new_group (the last rank; it waits at the wait line with rank 0,
    a non-member, while the other members wait inside new_group at the fault line). Rank 0
    skipping new_group is harmless on torch 2.15 gloo (non-members need not call it).
    """
    ws = world_size or DEFAULT_WORLD_SIZE[name]
    if name == "p2p_deadlock":
        return frozenset(range(ws))
    if name == "subgroup_mismatch":
        return frozenset({ws - 1})
    return frozenset(r for r, m in roles(name, ws).items() if m == "fault")


def exiting_ranks(name: str, world_size: int | None = None) -> frozenset[int]:
    """Ranks that exit on purpose; every other rank must stay alive and hung."""
    ws = world_size or DEFAULT_WORLD_SIZE[name]
    return frozenset({ws - 1}) if name == "rank_exited" else frozenset()


#: Culprit ranks at the default world size (see :func:`culprits`).
CULPRITS: dict[str, frozenset[int]] = {name: culprits(name) for name in SCENARIOS}
#: Ranks that exit on purpose at the default world size.
EXPECTED_EXITED: dict[str, frozenset[int]] = {name: exiting_ranks(name) for name in SCENARIOS}

#: The cause ID (triage.taxonomy) each scenario plants.
CAUSE_IDS: dict[str, str] = {name: f"hang.{name}" for name in SCENARIOS}

_PY_SPY_TIMEOUT_S = 20.0


class ScenarioError(RuntimeError):
    """The job did not behave like a hung scenario (it finished, or a rank died unexpectedly)."""


def py_spy_path() -> str:
    """The py-spy binary, as the stack tool finds it."""
    found = pyspy.binary()
    if found is None:
        raise FileNotFoundError("py-spy not found (pip install py-spy)")
    return found


def py_spy_dump(
    pid: int, *, with_locals: bool = False, timeout_s: float = _PY_SPY_TIMEOUT_S
) -> str:
    """Raw stdout of ``py-spy dump --pid PID --json [--locals]``; CalledProcessError on failure."""
    cmd = pyspy.dump_command(py_spy_path(), pid, with_locals)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, cmd, res.stdout, res.stderr)
    return res.stdout


def main_thread(threads: Sequence[Mapping[str, Any]], pid: int) -> Mapping[str, Any] | None:
    """The main thread of a parsed py-spy JSON dump (its OS thread id equals the pid)."""
    for t in threads:
        if t.get("os_thread_id") == pid or t.get("thread_name") == "MainThread":
            return t
    return threads[0] if threads else None


def stack_signature(
    threads: Sequence[Mapping[str, Any]], pid: int
) -> tuple[tuple[str, str, int], ...]:
    """(function, file, line) of every frame of the main thread, innermost first."""
    t = main_thread(threads, pid)
    if t is None:
        return ()
    return tuple(
        (str(f.get("name")), str(f.get("filename")), int(f.get("line") or 0))
        for f in t.get("frames", [])
    )


def die_with_parent_process() -> None:
    """In the child before exec: SIGKILL me when the thread that started me exits (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: rely on __exit__ and the finalizer
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL every rank's process group, then reap. Safe to call more than once."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL is not ignorable
            p.wait(timeout=30)
        # A rank's process group may still hold children it forked; kill leftovers too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


class RankJob:
    """A multi-process gloo job, one OS process per rank, killed on exit whatever happens.

    >>> with RankJob("mismatched_collective") as job:
    ...     job.wait_until_stalled()
    ...     job.pids  # index = rank

    ``world_size`` defaults to the scenario's DEFAULT_WORLD_SIZE (4 for a custom script).
    ``env`` is merged over os.environ (OMP_NUM_THREADS defaults to 1); the launcher sets RANK,
    LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT.
    ``rank_env(rank)`` gives one rank's variables, set last over the launcher's own: a job
    that says it spans nodes (LOCAL_WORLD_SIZE, LOCAL_RANK, GROUP_RANK) on this one host.
    Each rank writes ``log_dir/rank{N}.log`` (a temporary directory, removed on exit, when
    ``log_dir`` is None) and runs in its own session, with its cwd in ``log_dir``.

    Processes never outlive the job: ``__exit__``/``close()`` SIGKILLs every rank's process
    group and reaps it, a weakref finalizer does the same at garbage collection or interpreter
    exit, and with ``die_with_parent`` (default) each rank gets PR_SET_PDEATHSIG=SIGKILL, so
    it dies even if this process is SIGKILLed. Note that the death signal fires when the
    *thread* that called ``start()`` exits: start jobs from a thread that outlives them.
    """

    def __init__(
        self,
        name_or_script: str | os.PathLike[str],
        world_size: int | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        die_with_parent: bool = True,
        rank_env: Callable[[int], Mapping[str, str]] | None = None,
    ) -> None:
        key = str(name_or_script)
        if key in SCENARIOS:
            self.name: str | None = key
            self.script = SCENARIOS[key]
        else:
            self.script = Path(name_or_script).resolve()
            self.name = self.script.stem if self.script.stem in SCENARIOS else None
            if not self.script.is_file():
                raise FileNotFoundError(f"no scenario or script named {key!r}")
        if world_size is None:
            world_size = DEFAULT_WORLD_SIZE.get(self.name or "", 4)
        self.world_size = world_size
        self.extra_env = dict(env or {})
        self.rank_env = rank_env
        self.die_with_parent = die_with_parent
        #: Set here when given; otherwise start() makes a temporary one (``_scratch``, removed
        #: by close()), so a job never started leaves no folder behind.
        self.log_dir: Path
        self._own_log_dir = log_dir is None
        self._scratch: Path | None = None
        if log_dir is not None:
            self.log_dir = Path(log_dir)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []
        self.port: int | None = None
        self._logs: list[IO[bytes]] = []
        self._finalizer: weakref.finalize | None = None  # type: ignore[type-arg]
        self.expected_exited: frozenset[int] = (
            exiting_ranks(self.name, world_size) if self.name else frozenset()
        )

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> RankJob:
        if self.procs:
            raise RuntimeError("already started")
        if self._own_log_dir:
            self._scratch = Path(
                tempfile.mkdtemp(prefix=f"triage-{self.name or self.script.stem}-")
            )
            self.log_dir = self._scratch
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        base = dict(os.environ)
        base.setdefault("OMP_NUM_THREADS", "1")  # 2-core machines: no thread oversubscription
        base.update(self.extra_env)
        base.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(self.port),
            WORLD_SIZE=str(self.world_size),
            LOCAL_WORLD_SIZE=str(self.world_size),
            PYTHONUNBUFFERED="1",
        )
        # Registered before the first Popen so a failure half-way still cleans up.
        self._finalizer = weakref.finalize(self, _kill_all, self.procs)
        for rank in range(self.world_size):
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
            env.update(self.rank_env(rank) if self.rank_env else {})
            log = open(self.log_dir / f"rank{rank}.log", "wb")  # noqa: SIM115
            self._logs.append(log)
            p = subprocess.Popen(
                [sys.executable, str(self.script)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=str(self.log_dir),
                preexec_fn=die_with_parent_process if self.die_with_parent else None,
            )
            self.procs.append(p)
            self.pids.append(p.pid)
        return self

    def close(self) -> None:
        """Kill every rank (SIGKILL to each process group) and reap them."""
        if self._finalizer is not None:
            self._finalizer()  # runs _kill_all once
        for log in self._logs:
            log.close()
        self._logs.clear()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> RankJob:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- inspection ------------------------------------------------------------------------
    def log_path(self, rank: int) -> Path:
        return self.log_dir / f"rank{rank}.log"

    def log_text(self, rank: int) -> str:
        try:
            return self.log_path(rank).read_text(errors="replace")
        except OSError:
            return ""

    def exited_ranks(self) -> dict[int, int]:
        """rank -> exit code, for the ranks that are no longer running."""
        out: dict[int, int] = {}
        for rank, p in enumerate(self.procs):
            rc = p.poll()
            if rc is not None:
                out[rank] = rc
        return out

    def live_ranks(self) -> list[int]:
        return [r for r, p in enumerate(self.procs) if p.poll() is None]

    def logs_tail(self, n: int = 15) -> str:
        parts = []
        for rank in range(len(self.procs)):
            rc = self.procs[rank].poll()
            state = "running" if rc is None else f"exited rc={rc}"
            parts.append(f"--- rank{rank} ({state}) ---\n{_tail(self.log_path(rank), n)}")
        return "\n".join(parts)

    def marker_line(self, marker: str) -> int:
        """1-based line of the script line carrying the comment ``# triage: <marker>``."""
        pat = re.compile(r"#\s*triage:\s*" + re.escape(marker) + r"\b")
        for i, line in enumerate(self.script.read_text().splitlines(), start=1):
            if pat.search(line):
                return i
        raise ValueError(f"{self.script} has no '# triage: {marker}' line")

    def wait_until_stalled(
        self, timeout_s: float = 90.0, interval_s: float = 0.3
    ) -> dict[int, list[dict[str, Any]]]:
        """Poll until the job is hung; return the last py-spy dump (parsed) of each live rank.

        Hung means: every still-running rank printed ``TRIAGE-SCENARIO: armed`` and two
        consecutive py-spy dumps of every live rank, ``interval_s`` apart, show the same
        main-thread stack. Ranks that exited are fine, unless this is a known scenario and the
        rank is not one that exits on purpose (then ScenarioError). TimeoutError carries the
        tail of every rank's log.
        """
        if not self.procs:
            raise RuntimeError("job not started")
        deadline = time.monotonic() + timeout_s
        prev: dict[int, tuple[tuple[str, str, int], ...]] = {}
        while True:
            exited = self.exited_ranks()
            if self.name is not None:
                bad = {r: rc for r, rc in exited.items() if r not in self.expected_exited}
                if bad:
                    raise ScenarioError(
                        f"{self.name}: rank(s) {sorted(bad)} exited (rc {bad}) instead of "
                        f"hanging\n{self.logs_tail()}"
                    )
            live = [r for r in range(len(self.procs)) if r not in exited]
            if not live:
                raise ScenarioError(f"every rank exited; nothing is hung\n{self.logs_tail()}")
            armed = all(ARMED_LINE in self.log_text(r) for r in live)
            cur: dict[int, tuple[tuple[str, str, int], ...]] = {}
            dumps: dict[int, list[dict[str, Any]]] = {}
            if armed:
                for r in live:
                    try:
                        threads = json.loads(py_spy_dump(self.pids[r]))
                    except (subprocess.SubprocessError, ValueError):
                        break  # starting up or exiting: sample again next round
                    dumps[r] = threads
                    cur[r] = stack_signature(threads, self.pids[r])
                else:
                    if cur == prev and all(cur.values()) and set(live) == set(self.live_ranks()):
                        return dumps
            prev = cur
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job did not stall within {timeout_s:.0f}s (armed={armed})\n{self.logs_tail()}"
                )
            time.sleep(interval_s)


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
