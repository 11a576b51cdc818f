"""Where the py-spy binary is, how a dump is asked of it, and what its answer means;
stdlib only.

Shared by the stack tool, the scenario harness and the console script, which must stay
light: `start_early` runs before the CLI has imported anything (so JSON and the thread
pool are imported only when a dump is read).

py-spy pauses a process for a few milliseconds to read its stacks; it never changes
it. `dump_all` dumps ranks in parallel so 64 ranks take about as long as one. Only one
tracer can pause a process at a time: a dump that finds another one attached (a second
triage, gdb, strace) keeps trying for a few seconds, then names that tracer (`tracer_of`)
instead of blaming permissions.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import threading
from pathlib import Path

PTRACE_HINT = (
    "py-spy needs ptrace: run as root or the job's user, add CAP_SYS_PTRACE to the "
    "container (docker --cap-add SYS_PTRACE), or set kernel.yama.ptrace_scope=0"
)
MAX_WORKERS = 32
#: How long a dump keeps trying while another tracer holds the process: long enough for
#: the dumps of several triage runs at once (tens of ms each, more on a loaded host),
#: short enough that a debugger's hold costs seconds, not the dump's timeout. Pauses
#: between tries grow from the first to the longest.
BUSY_WAIT_S = 5.0
FIRST_PAUSE_S = 0.02
LONGEST_PAUSE_S = 0.25

#: Dumps started before the CLI loaded, by pid: (binary, dump). See `start_early`.
_early: dict[int, tuple[str, EarlyDump]] = {}
#: The thread that starts them, joined before one is taken.
_starting: threading.Thread | None = None


class Dump:
    """One pid's py-spy dump: its threads (py-spy's JSON), or why there are none."""

    __slots__ = ("pid", "threads", "error", "hint")

    def __init__(
        self,
        pid: int,
        threads: list[dict[str, object]] | None = None,
        error: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.pid = pid
        self.threads = threads
        self.error = error
        self.hint = hint


class EarlyDump:
    """A dump `start_early` began (or an early host query, `early_commands`). Its output
    goes to an in-memory file, not a pipe: the starter waits for one dump to end before it
    starts another, and a rank's stacks can outgrow a pipe's buffer, which would hold the
    dump until someone read it."""

    __slots__ = ("process", "output")

    def __init__(self, process: subprocess.Popen[str], output: int) -> None:
        self.process = process
        self.output = output

    def communicate(self, timeout_s: float) -> tuple[str, str]:
        """The dump's JSON and its stderr, once it has ended."""
        _, stderr = self.process.communicate(timeout=timeout_s)
        os.lseek(self.output, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self.output, 1 << 20):
            chunks.append(chunk)
        self.close()
        return b"".join(chunks).decode("utf-8", errors="replace"), stderr

    def close(self) -> None:
        os.close(self.output)


def binary() -> str | None:
    """py-spy on PATH, or beside this interpreter (a venv that is not on PATH)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def dump_command(py_spy: str, pid: int, with_locals: bool, nonblocking: bool = False) -> list[str]:
    """`nonblocking` reads without pausing the process: the only way to read one that a
    signal already stopped (py-spy's pause fails there), and consistent since it is."""
    return (
        [py_spy, "dump", "--pid", str(pid), "--json"]
        + (["--locals"] if with_locals else [])
        + (["--nonblocking"] if nonblocking else [])
    )


def start_dump(
    py_spy: str,
    pid: int,
    with_locals: bool,
    nonblocking: bool = False,
    stdout: int = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """A py-spy dump of `pid`, running; its JSON comes on `stdout` (a pipe unless a file
    descriptor is given), its reason on stderr."""
    return subprocess.Popen(
        dump_command(py_spy, pid, with_locals, nonblocking),
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def start_early(argv: list[str]) -> bool:
    """For `triage hang --pids P...` (and `triage collect`), start the first py-spy dump
    of each pid now; whether it did (the command reads live processes).

    Importing the CLI (typer, pydantic, the engine) takes longer than dumping every rank,
    and the dumps need none of it: started first, they run on another core meanwhile, and
    they catch the ranks as close as possible to the moment the user asked. Only the
    unambiguous form is read (`hang` or `collect` first, then `--pids` and the bare pids
    after it); anything else waits for the dump tool as usual. `take_early` hands a dump
    over.
    """
    if not argv or argv[0] not in ("hang", "collect"):
        return False
    pids: list[int] = []
    taking = False
    for token in argv[1:]:
        if token.startswith("--pids="):
            token, taking = token.removeprefix("--pids="), True
        elif token == "--pids":
            taking = True
            continue
        elif token.startswith("-"):
            taking = False
            continue
        if taking:
            pids += [int(p) for p in token.replace(",", " ").split() if p.isdigit()]
    found = binary() if pids else None
    if found is None or not hasattr(os, "memfd_create"):  # Linux: the dumps' in-memory files
        return False
    global _starting
    if _starting is not None:  # one start at a time: `take_early` waits for the last
        _starting.join()
    _starting = threading.Thread(target=_start_all, args=(found, list(dict.fromkeys(pids))))
    _starting.daemon = True  # a usage error must not wait for it
    _starting.start()
    return True


def _start_all(found: str, pids: list[int]) -> None:
    """Start the early dumps, from a thread, a few at a time: about one per core. Each
    dump is a few milliseconds of CPU; 32 of them at once leave the CLI's import a sliver
    of the cores until they all end, and then the CLI's own work runs alone on an idle
    machine. Paced, the import runs beside them and the dumps end when it does.

    The next dump starts as soon as any running one ends: the wait is on the dumps'
    pidfds, in the kernel, and a short switch interval hands this thread the GIL at once
    when it wakes (by default the import would keep it for up to 5 ms per dump)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    running: dict[int, subprocess.Popen[str]] = {}
    try:
        for pid in pids:
            if len(running) >= _IN_FLIGHT:
                _wait_any(running)
            try:
                output = os.memfd_create("py-spy-dump")
            except OSError:
                return
            try:
                process = start_dump(found, pid, with_locals=False, stdout=output)
            except OSError:
                os.close(output)
                return
            _early[pid] = (found, EarlyDump(process, output))
            running[_watch(process)] = process
    finally:
        sys.setswitchinterval(interval)
        for handle in running:
            if handle >= 0:
                os.close(handle)


def _watch(process: subprocess.Popen[str]) -> int:
    """A pidfd that turns readable when the dump ends; where the kernel has none (before
    Linux 5.3), a negative key that `_wait_any` waits on the old way."""
    try:
        return os.pidfd_open(process.pid)
    except OSError:
        return -process.pid


def _wait_any(running: dict[int, subprocess.Popen[str]]) -> None:
    """Wait until one of the running dumps ends, at most `PACE_WAIT_S`: a slow dump is
    not waited out (it leaves the count of those running, not the dumps)."""
    handles = [handle for handle in running if handle >= 0]
    oldest = next(iter(running))
    if handles:
        ended, _, _ = select.select(handles, [], [], PACE_WAIT_S)
    else:
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[oldest].wait(timeout=PACE_WAIT_S)
        ended = []
    for handle in ended or [oldest]:
        del running[handle]
        if handle >= 0:
            os.close(handle)


#: Early dumps running at once: one per core. Measured at 32 ranks on 2 cores, 21 runs
#: each on the same hung job, `triage hang` against the sequential py-spy loop: 2 at once
#: 1.16x, 1 1.39x, 3 1.31x, 4 1.41x (1.29x before the next dump started the moment one
#: ended). All 32 at once were 1.44x.
_IN_FLIGHT = len(os.sched_getaffinity(0))
#: How long the starter waits for a running dump before it starts the next regardless.
PACE_WAIT_S = 0.5
#: The GIL's switch interval while the dumps start (Python's default is 5 ms).
SWITCH_INTERVAL_S = 0.0005


def take_early(py_spy: str, pid: int) -> EarlyDump | None:
    """The dump `start_early` began for `pid` with this binary, once; None otherwise."""
    if _starting is not None:
        _starting.join()
    started = _early.pop(pid, None)
    if started is None or started[0] != py_spy:
        return None
    return started[1]


def tracer_of(pid: int) -> tuple[int, str] | None:
    """The process tracing `pid` (/proc/PID/status TracerPid) and its name, if any."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status:
            fields = dict(line.partition(":")[::2] for line in status)
        tracer = int(fields.get("TracerPid", "0").strip() or 0)
    except (OSError, ValueError):
        return None
    if tracer <= 0:
        return None
    try:
        with open(f"/proc/{tracer}/comm", encoding="utf-8", errors="replace") as comm:
            name = comm.read().strip() or "?"
    except OSError:
        name = "?"
    return tracer, name


def held_by_tracer(stderr: str) -> bool:
    """py-spy read the process but could not pause it: ptrace answers EPERM to a second
    tracer, and a process it may read is one it may trace, so this is no permission gap."""
    lowered = stderr.lower()
    return "failed to suspend process" in lowered and (
        "eperm" in lowered or "operation not permitted" in lowered
    )


def is_stopped(pid: int) -> bool:
    """Whether the process is stopped (T: SIGSTOP, SIGTSTP; t: a debugger's hold): py-spy
    cannot pause it, and waiting for its tracer will not help. Read a few times apart: a
    process under strace passes through `t` at every system call, and is not stopped."""
    import time

    for sample in range(_STOPPED_SAMPLES):
        if sample:
            time.sleep(0.01)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                state = stat.read().rpartition(b")")[2].split()[:1]
        except OSError:
            return False
        if state not in ([b"T"], [b"t"]):
            return False
    return True


_STOPPED_SAMPLES = 3


def explain(pid: int, stderr: str) -> tuple[str, str | None]:
    """Why py-spy could not dump `pid`, from its stderr, and what the user can do."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line.removeprefix("Error:").strip() for line in lines if line.startswith("Error:")]
    last = (errors or lines or ["py-spy failed without a message"])[0]
    lowered = stderr.lower()
    if held_by_tracer(stderr):
        tracer = tracer_of(pid)
        held = f"holds it: {tracer[1]} (pid {tracer[0]})" if tracer else "held it at every try"
        return (
            f"pid {pid}: another tracer (py-spy, gdb, strace) {held}",
            "only one tracer can pause a process: let that one finish (or detach it) and"
            " run triage again",
        )
    if "permission denied" in lowered or "operation not permitted" in lowered:
        return f"pid {pid}: permission denied", PTRACE_HINT
    if (
        "no such process" in lowered
        or "failed to find process" in lowered
        or not os.path.exists(f"/proc/{pid}")
    ):
        return f"pid {pid}: process is gone", None
    if "python" in lowered and ("failed to find" in lowered or "not a python" in lowered):
        return f"pid {pid}: not a Python process (or its interpreter is unsupported)", None
    return f"pid {pid}: {last[:200]}", None


def dump_one(
    binary: str, pid: int, with_locals: bool, timeout_s: float, nonblocking: bool = False
) -> Dump:
    """Dump one pid (taking over the dump `start_early` began, when there is one). While
    another tracer holds the process, try again after growing pauses for up to
    BUSY_WAIT_S."""
    import json
    import random
    import time

    early = None if with_locals or nonblocking else take_early(binary, pid)
    process = early.process if early else None
    deadline, pause = time.monotonic() + BUSY_WAIT_S, FIRST_PAUSE_S
    while True:
        try:
            process = process or start_dump(binary, pid, with_locals, nonblocking)
        except OSError as exc:
            return Dump(pid, error=f"pid {pid}: py-spy could not start: {exc}")
        try:
            if early is not None:
                stdout, stderr = early.communicate(timeout_s)
                early = None
            else:
                stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            if early is not None:
                early.close()
            return Dump(
                pid,
                error=f"pid {pid}: py-spy dump timed out after {timeout_s:g}s",
                hint="the process may be in uninterruptible sleep (D state); retry, or raise"
                " --timeout",
            )
        if process.returncode == 0 or not held_by_tracer(stderr):
            break
        if time.monotonic() >= deadline or is_stopped(pid):
            break
        time.sleep(pause * random.uniform(0.5, 1.5))  # runs started together collide again
        pause, process = min(pause * 2, LONGEST_PAUSE_S), None
    if process.returncode != 0:
        error, hint = explain(pid, stderr)
        return Dump(pid, error=error, hint=hint)
    try:
        threads = json.loads(stdout)
    except json.JSONDecodeError:
        return Dump(pid, error=f"pid {pid}: py-spy printed no JSON")
    return Dump(pid, threads=threads if isinstance(threads, list) else [])


def dump_all(binary: str, pids: list[int], with_locals: bool, timeout_s: float) -> list[Dump]:
    """Dump every pid in parallel, in the order given."""
    from concurrent.futures import ThreadPoolExecutor

    if not pids:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(pids))) as pool:
        return list(pool.map(lambda pid: dump_one(binary, pid, with_locals, timeout_s), pids))
