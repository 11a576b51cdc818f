"""`triage run -- COMMAND...`: run a job with debugging on, watch it, triage it when it breaks.

The job runs unchanged; only its environment gains what a senior engineer would set before
a rerun (Flight Recorder buffer and dump files, NCCL INFO logs per process, torchrun's
per-rank prefixes and logs, optionally TORCH_DISTRIBUTED_DEBUG), and every value the user
set wins. Everything lands in one folder: the launcher's output (`launcher.log`, which the
job writes itself so it outlives this process), NCCL logs, Flight Recorder dumps, and the
report. When the job exits non-zero the report is built from that folder; when every rank
sits in a collective with an unchanged stack and the job prints nothing for `hang_after`
seconds, the ranks' stacks are read and Flight Recorder dumps are asked for (a signal to
ranks that installed `triage.probe`, a write to NCCL's dump pipe), then the job is left
running (exit code 3) unless `kill_on_hang`.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import psutil

from triage.engine import analyze, triage
from triage.errors import TriageError
from triage.job.probe_signal import (
    DUMP_DIR_ENV,
    SAFE_SIGNALS,
    catches,
    snapshot_dir,
    snapshots_of,
    wait_for_snapshots,
)
from triage.models import Gap, Report
from triage.observations import RankState
from triage.playbooks import Playbook, load_playbooks, symptom_playbooks
from triage.registry import REGISTRY
from triage.render import render_json
from triage.render.markdown import render_markdown

HANG_EXIT_CODE = 3
DEFAULT_HANG_AFTER_S = 300.0
LAUNCHER_LOG = "launcher.log"
FR_DIR = "fr"
NCCL_DIR = "nccl"
PROBE_DIR = "probe"
TORCHRUN_DIR = "torchrun"
#: torch's own default name for Flight Recorder dump files; triage.probe writes the same.
FR_PREFIX = "nccl_trace_rank_"
#: The probe's side of the protocol (triage.probe is not imported here: importing it
#: installs its handler, which this process must not have).
PROBE_DIR_ENV = "TRIAGE_FR_DIR"
PROBE_MARKER_PREFIX = ".probe-"
#: NCCL's dump-on-write fifos; hidden so that folder walks never open (and block on) them.
PIPE_PREFIX = ".nccl_pipe_rank_"
FR_BUFFER_ENTRIES = "2000"
PROBE_WAIT_S = 10.0
KILL_GRACE_S = 5.0
_PEER_WAITS = {"collective", "p2p", "group_setup"}
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_LAUNCHER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "deepspeed.launcher.runner",
    "deepspeed.launcher.launch",
    "accelerate.commands.launch",
}
_LAUNCHER_SCRIPTS = {"torchrun", "deepspeed", "accelerate"}
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


class RunError(TriageError):
    """`triage run` could not start the job: bad output folder, command not found."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Setting:
    """One debug variable; `names` are aliases torch reads in order (new name first),
    `only` the aliases to set when not all of them (None: all)."""

    names: tuple[str, ...]
    value: str
    only: tuple[str, ...] | None = None


def torch_version() -> tuple[int, int] | None:
    """(major, minor) of the torch installed beside triage, read without importing it."""
    try:
        major, minor = importlib.metadata.version("torch").split(".")[:2]
        return int(major), int(minor)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def settings(out: Path, debug_detail: bool, torch: tuple[int, int] | None) -> list[Setting]:
    """What to set. torch >= 2.8 reads TORCH_FR_BUFFER_SIZE and warns on every rank about
    the old name, older torch reads only the old one; both when the version is unknown."""
    fr, nccl = out / FR_DIR, out / NCCL_DIR
    buffer = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
    only = None if torch is None else buffer[:1] if torch >= (2, 8) else buffer[1:]
    chosen = [
        # Flight Recorder: the last collectives of every rank (off by default in older torch)
        Setting(buffer, FR_BUFFER_ENTRIES, only),
        # NCCL dumps the recorder when a collective times out, one file per rank, here
        Setting(("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"), "1"),
        Setting(
            ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), str(fr / FR_PREFIX)
        ),
        # ... and on demand, when its pipe is written (triage run does on a hang)
        Setting(("TORCH_NCCL_DEBUG_INFO_PIPE_FILE",), str(fr / PIPE_PREFIX)),
        # NCCL's setup, transports and errors, one log per process
        Setting(("NCCL_DEBUG",), "INFO"),
        Setting(("NCCL_DEBUG_FILE",), str(nccl / "nccl.%h.%p")),
        # where triage.probe writes its dumps (gloo has no dump of its own on a hang)
        Setting((PROBE_DIR_ENV,), str(fr)),
        # ... and its snapshots (the job's own probe.snapshot() calls, and on the signal)
        Setting((DUMP_DIR_ENV,), str(out / PROBE_DIR)),
        # torchrun --tee 3 --log-dir: every line says its rank; per-rank logs and error files
        Setting(("PET_TEE",), "3"),
        Setting(("PET_LOG_DIR",), str(out / TORCHRUN_DIR)),
        # output reaches the log before a crash or a kill
        Setting(("PYTHONUNBUFFERED",), "1"),
    ]
    if debug_detail:  # collective fingerprint checks: mismatches fail instead of hanging
        chosen.append(Setting(("TORCH_DISTRIBUTED_DEBUG",), "DETAIL"))
    return chosen


@dataclass
class JobEnvironment:
    env: dict[str, str]
    applied: dict[str, str] = field(default_factory=dict)
    #: name -> (the user's value, what triage run would have set)
    kept: dict[str, tuple[str, str]] = field(default_factory=dict)

    def kept_lines(self) -> list[str]:
        return [
            f"kept your {name}={theirs!r} (triage run would set {ours!r})"
            for name, (theirs, ours) in self.kept.items()
        ]


def job_environment(base: Mapping[str, str], out: Path, debug_detail: bool) -> JobEnvironment:
    """The job's environment: `base` plus the debug settings the user did not set.

    A setting with aliases is skipped whole when the user set any alias, because torch
    reads the first one set (their TORCH_NCCL_TRACE_BUFFER_SIZE=0 must not lose to our
    TORCH_FR_BUFFER_SIZE).
    """
    result = JobEnvironment(env=dict(base))
    for setting in settings(out, debug_detail, torch_version()):
        theirs = [name for name in setting.names if name in base]
        if theirs:
            result.kept |= {
                name: (base[name], setting.value) for name in theirs if base[name] != setting.value
            }
            continue
        for name in setting.only or setting.names:
            result.env[name] = setting.value
            result.applied[name] = setting.value
    return result


def output_dir(requested: Path | None) -> Path:
    """The run's folder: new, or empty; never a folder holding someone's files."""
    if requested is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        requested = Path(f"triage-run-{stamp}")
        suffix = 1
        while requested.exists():
            suffix += 1
            requested = Path(f"triage-run-{stamp}-{suffix}")
    out = requested.absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunError(f"{out} exists and is not an empty folder; choose another --out")
    for sub in (out, out / FR_DIR, out / NCCL_DIR):
        sub.mkdir(parents=True, exist_ok=True)
    return out


# -- the job -------------------------------------------------------------------------------


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


# -- watching --------------------------------------------------------------------------------


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.Error, OSError):
        return []


def is_launcher(argv: list[str]) -> bool:
    """`python -m torch.distributed.run ...`, `.../bin/torchrun ...`: a launcher, not a rank
    (whose own arguments may well mention one, like `--deepspeed ds.json`)."""
    if "-m" in argv[:3]:
        module = argv[argv.index("-m") + 1 : argv.index("-m") + 2]
        return bool(module) and module[0] in _LAUNCHER_MODULES
    return len(argv) > 1 and os.path.basename(argv[1]) in _LAUNCHER_SCRIPTS


def rank_pids(launcher_pid: int) -> list[int]:
    """The job's rank processes: Python descendants with a RANK (torchrun, deepspeed,
    srun wrappers), else the launcher's Python children (mp.spawn), else the launcher
    itself; workers of a rank (DataLoader) and launchers in between are left out."""
    try:
        root = psutil.Process(launcher_pid)
        family = root.children(recursive=True)
    except psutil.Error:
        return []
    candidates: dict[int, psutil.Process] = {}
    for proc in family:
        argv = _cmdline(proc)
        words = " ".join(argv)
        if not argv or "python" not in os.path.basename(argv[0]).lower():
            continue
        if is_launcher(argv) or any(helper in words for helper in _HELPERS):
            continue
        candidates[proc.pid] = proc
    with_rank = {pid: p for pid, p in candidates.items() if "RANK" in _environ(p)}
    pool = with_rank or candidates
    ranks = []
    for pid, proc in pool.items():
        try:
            ancestors = {parent.pid for parent in proc.parents()}
        except psutil.Error:
            continue
        if not ancestors & set(pool):
            ranks.append(pid)
    argv = _cmdline(root)
    if not ranks and argv and "python" in os.path.basename(argv[0]).lower():
        ranks = [] if is_launcher(argv) else [launcher_pid]
    return sorted(ranks)


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


# -- collecting dumps --------------------------------------------------------------------------


def _marker(fr_dir: Path, pid: int) -> dict[str, Any] | None:
    path = fr_dir / f"{PROBE_MARKER_PREFIX}{pid}"
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(1 << 16))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("pid") == pid else None


def signal_probes(pids: list[int], fr_dir: Path) -> tuple[list[int], list[Gap]]:
    """Ask ranks that installed `triage.probe` for a Flight Recorder dump.

    A signal is sent only where it cannot hurt: the rank's TRIAGE_FR_DIR is this run's,
    the probe's marker names this pid and a signal with no other meaning (SIGUSR1/2,
    real-time), and the kernel shows a handler for it (a process without one would be
    killed by it). Returns the pids that dumped, and gaps
    for those that did not.
    """
    asked: dict[int, tuple[int, int]] = {}  # pid -> (signals handled, dumps) before
    gaps: list[Gap] = []
    for pid in pids:
        info = _marker(fr_dir, pid)
        try:
            env_dir = psutil.Process(pid).environ().get(PROBE_DIR_ENV)
        except (psutil.Error, OSError):
            continue
        if info is None or not env_dir or Path(env_dir).absolute() != fr_dir:
            continue
        if info.get("owns_signal") is False:  # the job took the signal over for itself
            gaps.append(_probe_gap(pid, "the job installed its own handler for the signal"))
            continue
        signum = int(info.get("signal", 0))
        if signum not in SAFE_SIGNALS or not catches(pid, signum):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
            asked[pid] = (int(info.get("handled", 0)), int(info.get("dumps", 0)))
    dumped: list[int] = []
    deadline = time.monotonic() + PROBE_WAIT_S
    while asked and time.monotonic() < deadline:
        for pid, (handled, dumps) in list(asked.items()):
            info = _marker(fr_dir, pid)
            if info is None or int(info.get("handled", 0)) <= handled:
                continue
            del asked[pid]
            if int(info.get("dumps", 0)) > dumps:
                dumped.append(pid)
            else:
                errors = info.get("errors") or ["unknown error"]
                gaps.append(_probe_gap(pid, str(errors[-1])[:300]))
        time.sleep(0.1)
    gaps += [_probe_gap(pid, f"no dump within {PROBE_WAIT_S:g}s") for pid in asked]
    return dumped, gaps


def _snapshots_before(pids: list[int], env: Mapping[str, str]) -> dict[int, tuple[Path, set[Path]]]:
    """Each rank's snapshot folder and the snapshots already there, before the signal."""
    before = {}
    for pid in pids:
        directory = snapshot_dir(pid, _environ_of(pid) or env)
        if directory is not None:
            before[pid] = (directory, snapshots_of(directory, pid))
    return before


def _environ_of(pid: int) -> dict[str, str]:
    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return {}


def _probe_gap(pid: int, reason: str) -> Gap:
    return Gap(source=f"pid:{pid}", reason=f"triage.probe did not dump: {reason}", tool="run")


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


def _dumps(fr_dir: Path, since: float) -> list[Path]:
    """Dump files written since `since` (hidden files are markers, pipes, partial writes)."""
    found = []
    for path in fr_dir.glob("[!.]*"):
        with contextlib.suppress(OSError):
            if path.is_file() and path.stat().st_mtime >= since:
                found.append(path)
    return found


def _wait_for_dumps(fr_dir: Path, count: int, since: float) -> None:
    deadline = time.monotonic() + PROBE_WAIT_S
    while len(_dumps(fr_dir, since)) < count and time.monotonic() < deadline:
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


# -- triage --------------------------------------------------------------------------------------


def _playbooks(hung: bool, plugin_dirs: list[Path]) -> tuple[Playbook, dict[str, Playbook]]:
    """One playbook for the whole run: the hang playbook's tools (live ranks first), then
    whatever else the analyze playbook reads, with every rule deciding."""
    playbooks = load_playbooks(plugin_dirs)
    intake, hang = playbooks["analyze"], playbooks["hang"]
    tools = {step.tool for step in hang.steps}
    steps = [*hang.steps, *(step for step in intake.steps if step.tool not in tools)]
    by_symptom = symptom_playbooks(playbooks)
    if hung:
        merged = hang.model_copy(update={"name": "run", "steps": steps, "causes": ["*"]})
    else:
        merged = intake.model_copy(update={"name": "run", "steps": steps})
    return merged, by_symptom


def build_report(targets: dict[str, Any], hung: bool, plugin_dirs: list[Path]) -> Report:
    playbook, by_symptom = _playbooks(hung, plugin_dirs)
    if hung:
        return triage(playbook, targets)
    return analyze(playbook, by_symptom, targets)


# -- the whole run -------------------------------------------------------------------------------


@dataclass
class RunOptions:
    command: list[str]
    out: Path | None = None
    hang_after: float = DEFAULT_HANG_AFTER_S
    debug_detail: bool = False
    kill_on_hang: bool = False
    signal_probe: bool = True
    as_json: bool = False
    plugin_dirs: list[Path] = field(default_factory=list)


def _say(text: str) -> None:
    print(f"triage run: {text}", file=sys.stderr, flush=True)


def _shell_code(code: int) -> int:
    """A signal death reads as 128+N, as in a shell."""
    return 128 - code if code < 0 else code


def run_job(options: RunOptions, show: Callable[[Report], None]) -> int:
    """Run the job; returns the exit code `triage run` exits with."""
    if not options.command:
        raise RunError("give the command to run after --, e.g. triage run -- torchrun ...")
    if options.hang_after <= 0:
        raise RunError("--hang-after must be positive")
    out = output_dir(options.out)
    environment = job_environment(os.environ, out, options.debug_detail)
    _say(f"writing to {out}")
    if environment.applied:
        _say("set " + " ".join(f"{k}={v}" for k, v in environment.applied.items()))
    for line in environment.kept_lines():
        _say(line)
    log = out / LAUNCHER_LOG
    started = time.time()
    job = Job(options.command, environment.env, log)
    tail = Tail(log, sys.stderr.buffer if options.as_json else sys.stdout.buffer)
    tail.start()
    with forwarding(job):
        try:
            outcome = watch(job, options.hang_after, _say)
        finally:
            tail.stop()  # what the job prints from here on stays in the log only
        if outcome.exit_code is not None:
            return _after_exit(job, outcome, options, environment, out, started, show)
        return _after_hang(job, outcome, options, environment, out, started, show)


def _after_exit(
    job: Job,
    outcome: Outcome,
    options: RunOptions,
    environment: JobEnvironment,
    out: Path,
    started: float,
    show: Callable[[Report], None],
) -> int:
    code = outcome.exit_code or 0
    if job.interrupted is not None:
        _say(f"interrupted; the job exited with code {code}; its logs are in {out}")
        return _shell_code(code)
    if code == 0:
        _say(f"the job finished successfully in {outcome.seconds:.0f}s; its logs are in {out}")
        return 0
    _say(f"the job exited with code {code} after {outcome.seconds:.0f}s; triaging {out} ...")
    notes = [f"the job exited with code {code} after {outcome.seconds:.0f}s"]
    _triage(job, options, environment, out, started, [], notes, [], show)
    return _shell_code(code)


def _after_hang(
    job: Job,
    outcome: Outcome,
    options: RunOptions,
    environment: JobEnvironment,
    out: Path,
    started: float,
    show: Callable[[Report], None],
) -> int:
    pids = outcome.hung_pids
    _say(
        f"no progress for {options.hang_after:g}s: all {len(pids)} ranks wait in collectives;"
        " collecting stacks and Flight Recorder dumps ..."
    )
    fr_dir = Path(environment.env.get(PROBE_DIR_ENV, str(out / FR_DIR))).absolute()
    notes = [
        f"the job stopped making progress after {outcome.seconds:.0f}s: every rank waited in a"
        f" collective with an unchanged stack for {options.hang_after:g}s"
    ]
    asked_at = time.time()
    dumped: list[int] = []
    gaps: list[Gap] = []
    snapshots: list[str] = []
    if options.signal_probe:
        before = _snapshots_before(pids, environment.env)
        dumped, gaps = signal_probes(pids, fr_dir)
        dumped.sort()
        snapshots, _ = wait_for_snapshots({p: before[p] for p in dumped if p in before}, 1.0)
    else:
        notes.append("no rank was signalled (--no-signal-probe)")
    if dumped:
        notes.append(
            f"asked {len(dumped)} ranks (pids {', '.join(map(str, dumped))}) for a Flight"
            f" Recorder dump and an in-process snapshot with triage.probe's signal"
            f" ({len(snapshots)} snapshots); the job was not otherwise touched"
        )
    pipes = trigger_nccl_pipes(fr_dir)
    if pipes:
        _wait_for_dumps(fr_dir, pipes, asked_at)
        notes.append(f"asked NCCL for a Flight Recorder dump through {pipes} dump pipes")
    if options.signal_probe and not _dumps(fr_dir, started):
        gaps.append(
            Gap(
                source=str(fr_dir),
                reason="no Flight Recorder dump: gloo writes none on a hang, and no rank had"
                " triage.probe installed",
                hint="add `import triage.probe` at the top of the training script and run"
                " again: each rank then dumps its recorder when triage run detects the hang",
                tool="run",
            )
        )
    live = [pid for pid in pids if psutil.pid_exists(pid)]
    try:
        _triage(job, options, environment, out, started, live, notes, gaps, show, snapshots)
    finally:
        if options.kill_on_hang:
            _say("killing the job (--kill-on-hang)")
            job.kill_tree()
        else:
            _say(
                f"the job is still running (launcher pid {job.pid}); its output goes on into"
                f" {job.log}; stop it with: kill -TERM -- -{job.pid}"
            )
    return HANG_EXIT_CODE


def _triage(
    job: Job,
    options: RunOptions,
    environment: JobEnvironment,
    out: Path,
    started: float,
    pids: list[int],
    notes: list[str],
    gaps: list[Gap],
    show: Callable[[Report], None],
    snapshots: list[str] | None = None,
) -> None:
    """Build, write and show the report; a failure here costs the report, never the evidence."""
    paths = [str(out), *outside_files(environment.env, out, started)]
    paths += [p for p in snapshots or [] if Path(p).parent != out / PROBE_DIR]
    targets: dict[str, Any] = {"paths": paths}
    hung = job.proc.poll() is None
    if hung:
        targets |= {"pids": pids, "launcher_pid": job.pid}
    try:
        report = build_report(targets, hung, options.plugin_dirs)
        report.targets |= {
            "command": options.command,
            "out_dir": str(out),
            "launcher_pid": job.pid,
            "exit_code": job.proc.poll(),
            "hung": hung,
            "env_set": environment.applied,
            "env_kept": {name: theirs for name, (theirs, _) in environment.kept.items()},
        }
        if snapshots:
            report.targets["snapshot_files"] = snapshots
        report.notes = (
            notes
            + [f"triage run set {', '.join(environment.applied)} (values: targets.env_set)"]
            + environment.kept_lines()
            + report.notes
        )
        report.gaps = gaps + report.gaps
        (out / "report.json").write_text(render_json(report) + "\n", encoding="utf-8")
        (out / "report.md").write_text(render_markdown(report), encoding="utf-8")
        show(report)
        _say(f"report written to {out / 'report.md'} and {out / 'report.json'}")
    except Exception as exc:  # the evidence is on disk; the report is what failed
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        _say(f"error: triage failed ({first}); the job's logs and dumps are kept in {out}")
