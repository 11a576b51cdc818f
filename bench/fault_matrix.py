"""Fault-injection matrix: real gloo jobs on the CPU, one planted fault each, triage scored.

Each job runs one script of bench/faults/ (one script per fault type; FAULT_CULPRIT picks
the rank that carries the fault) at one world size under one launcher: separate processes
as triage.scenarios.RankJob starts them (`plain`), torchrun, or torch.multiprocessing.spawn.
triage is scored on it three ways, wherever the way applies:

- live: once the job has stalled (every rank armed, py-spy stacks of every rank unchanged
  over two polls), `triage hang --json` on the rank pids (`--launcher-pid` under torchrun
  and spawn);
- fr: every rank imported triage.probe and is sent its signal the way
  `triage hang --signal-probe` sends it (triage.job.probe_signal), so it dumps its Flight
  Recorder into TRIAGE_FR_DIR; then `triage analyze --json` on that folder alone;
- logs: the gloo timeout (--timeout, short) then fires on the ranks left waiting; once
  they have exited, `triage analyze --json` on the rank logs and the launcher's output.
  Faults that end the job (a rank dies: gloo peers fail within seconds) have only this way.

A verdict is the report's top hypothesis. Its cause is right when it is the fault's cause
ID or one of the IDs the fault also accepts (on that way); its ranks when they equal the
culprit ranks; its line when its location is a line of the job script marked
`# triage: fault` (or the fault's own marker). A line that the way's evidence cannot show
(a silent rank's logs, the dump of a rank that wrote none) is not scored. Jobs that did not
behave (no stall, a timeout that fired early) are listed as job errors, not as misses.

Prints a table per fault type and way, a calibration table over every verdict, the
misses (what was expected, what the top hypothesis said) and the revision of the checkout
each job ran against. The full matrix (172 jobs) takes about 50 minutes on 2 cores with
`--jobs 4`, mostly spent importing torch; `--slice` is the fixed two-rank set that
tests/test_fault_matrix_slice.py runs, under a minute. `--json` is rewritten after every
job and `--resume` runs only the jobs not in it yet, so a run killed half-way goes on
where it stopped. `--keep DIR` keeps each job's logs, dumps and triage reports, to see
what triage saw.

    python bench/fault_matrix.py [--jobs N] [--filter SUBSTR] [--ways live,fr,logs]
                                 [--slice] [--json OUT [--resume]] [--timeout S]
                                 [--keep DIR] [--list]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

import triage
from triage.job.probe_signal import request_snapshots
from triage.scenarios import (
    ARMED_LINE,
    RankJob,
    free_port,
    py_spy_dump,
    stack_signature,
)
from triage.scenarios.harness import die_with_parent_process

REPO = Path(__file__).resolve().parent.parent
FAULTS = REPO / "bench" / "faults"
WAYS = ("live", "fr", "logs")
BUCKETS = ((0.8, 1.01), (0.5, 0.8), (0.3, 0.5), (0.0, 0.3))
#: The jobs' gloo timeout: long enough for the live and fr ways to finish while the job
#: hangs (seconds, but many more on a loaded machine), short so the logs way does not wait
#: long.
TIMEOUT_S = 30.0
#: The slice's jobs are small and run two at a time: they are quick to stall.
SLICE_TIMEOUT_S = 10.0
#: Seconds a job may take after its gloo timeout before it is given up.
SLACK_S = 240.0
POLL_S = 0.3
#: Seconds to wait for the probes' dumps: a stopped rank, or one whose GIL is held, never
#: answers; on a loaded machine the others may take seconds.
PROBE_WAIT_S = 10.0


@dataclass(frozen=True)
class Fault:
    """One fault type: its script, what a right verdict says, and what it can be scored on."""

    name: str
    script: str
    cause: str
    #: Other cause IDs that are right too, on every way.
    accept: frozenset[str] = frozenset()
    #: Way -> cause IDs right on that way only (its evidence cannot tell them apart).
    accept_on: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: Ways whose evidence cannot show the fault's line.
    blind: frozenset[str] = frozenset()
    #: The ways that apply: a fault that ends the job leaves only logs.
    ways: tuple[str, ...] = WAYS
    marker: str = "fault"
    env: Mapping[str, str] = field(default_factory=dict)
    #: The fault is on every rank (no culprit position).
    every_rank: bool = False
    min_world: int = 2
    #: The culprit stays blocked outside any collective, so its gloo timeout never fires.
    stays: bool = False


_SILENT = frozenset({"logs", "fr"})  # a rank outside any collective: no error, no entry
_NO_DUMP = {"fr": frozenset({"hang.rank_exited"})}  # the rank cannot answer the signal


def _dies(how: str, blind: frozenset[str] = frozenset()) -> Fault:
    """A rank that dies mid-training. gloo peers then fail within seconds instead of
    hanging, so logs are all that is left; the peers' broken connections are the dead
    rank's doing (comm.peer_failure names it too)."""
    return Fault(
        f"dies_{how}",
        "rank_dies.py",
        "hang.rank_exited",
        accept=frozenset({"comm.peer_failure"}),
        blind=blind,
        ways=("logs",),
        marker=how,
        env={"FAULT_HOW": how},
    )


FAULT_TYPES: tuple[Fault, ...] = (
    Fault("skip_collective", "skip_collective.py", "hang.mismatched_collective"),
    Fault("extra_collective", "extra_collective.py", "hang.mismatched_collective"),
    Fault("data_dependent", "data_dependent.py", "hang.mismatched_collective"),
    Fault("different_op", "different_op.py", "hang.mismatched_collective"),
    Fault("shape_mismatch", "shape_mismatch.py", "hang.shape_mismatch"),
    Fault("sleep", "sleep_rank.py", "hang.rank_not_in_collective", blind=_SILENT, stays=True),
    Fault("fifo_read", "fifo_read.py", "hang.rank_not_in_collective", blind=_SILENT, stays=True),
    Fault("lock_held", "lock_held.py", "hang.rank_not_in_collective", blind=_SILENT, stays=True),
    Fault(
        "gil_held",
        "gil_held.py",
        "hang.rank_not_in_collective",
        accept_on=_NO_DUMP,
        blind=_SILENT,
        stays=True,
    ),
    Fault(
        "sigstop",
        "sigstop_rank.py",
        "hang.rank_not_in_collective",
        accept_on=_NO_DUMP,
        blind=_SILENT,
        stays=True,
    ),
    _dies("sigkill", blind=frozenset({"logs"})),  # no traceback: its line is nowhere
    _dies("exception"),
    _dies("exit", blind=frozenset({"logs"})),
    # gloo's Flight Recorder records no send/recv: the fr way has nothing to read.
    Fault(
        "recv_first", "recv_first.py", "hang.p2p_deadlock", ways=("live", "logs"), every_rank=True
    ),
    Fault("lazy_group", "lazy_group.py", "hang.subgroup_mismatch"),
    Fault("uneven_data", "uneven_data.py", "hang.uneven_inputs"),
    Fault(
        "dataloader_stuck",
        "dataloader_stuck.py",
        "hang.rank_not_in_collective",
        blind=_SILENT,
        stays=True,
    ),
    Fault(
        "breakpoint", "breakpoint_rank.py", "hang.rank_not_in_collective", blind=_SILENT, stays=True
    ),
    Fault("async_wait", "async_wait.py", "hang.mismatched_collective"),
    Fault(
        "irecv_unmatched",
        "irecv_unmatched.py",
        "hang.p2p_deadlock",
        accept=frozenset({"hang.mismatched_collective"}),
        # The irecv is not in gloo's Flight Recorder: the dumps show a rank in no collective.
        accept_on={"fr": frozenset({"hang.rank_not_in_collective"})},
        blind=frozenset({"fr"}),
    ),
    Fault("backward_collective", "backward_collective.py", "hang.mismatched_collective"),
    Fault(
        "mesh_dim",
        "mesh_dim.py",
        "hang.mismatched_collective",
        accept=frozenset({"hang.subgroup_mismatch"}),
        min_world=4,
    ),
    Fault("dtensor_partial", "dtensor_partial.py", "hang.mismatched_collective"),
)


@dataclass(frozen=True)
class Job:
    """One run: a fault type at one world size, culprit position and launcher."""

    fault: Fault
    world: int
    launcher: str
    culprit: int | None  # None: the fault is on every rank

    @property
    def id(self) -> str:
        who = "all" if self.culprit is None else f"r{self.culprit}"
        return f"{self.fault.name}/{self.launcher}/w{self.world}/{who}"

    @property
    def script(self) -> Path:
        return FAULTS / self.fault.script

    @property
    def ranks(self) -> list[int]:
        """The ranks a right verdict blames."""
        return list(range(self.world)) if self.culprit is None else [self.culprit]

    def lines(self) -> list[int]:
        return marker_lines(self.script, self.fault.marker)


#: (launcher, world, culprit position) per fault type: with separate processes the first,
#: middle and last rank of 4, and 2 and 8 ranks; torchrun with 2 and 4 ranks, spawn with 4.
PLACEMENTS: tuple[tuple[str, int, str], ...] = (
    ("plain", 2, "last"),
    ("plain", 4, "first"),
    ("plain", 4, "middle"),
    ("plain", 4, "last"),
    ("plain", 8, "middle"),
    ("torchrun", 2, "first"),
    ("torchrun", 4, "last"),
    ("spawn", 4, "middle"),
)

#: The CI slice (tests/test_fault_matrix_slice.py): job id -> ways. Two-rank jobs (and a
#: 2-D mesh, which needs four) and only ways that triage gets fully right today (cause,
#: ranks, line), so that a miss in the slice is a regression; about a minute with two
#: jobs at a time.
SLICE: dict[str, tuple[str, ...]] = {
    "extra_collective/plain/w2/r1": ("live", "fr", "logs"),
    "sleep/plain/w2/r1": ("live", "fr"),
    "recv_first/plain/w2/all": ("live", "logs"),
    "uneven_data/plain/w2/r1": ("live", "fr"),
    "lazy_group/torchrun/w2/r0": ("live",),
    "dies_exception/plain/w2/r1": ("logs",),
    "mesh_dim/plain/w4/r0": ("fr",),
}


def position(name: str, world: int) -> int:
    return {"first": 0, "middle": world // 2, "last": world - 1}[name]


def matrix() -> list[Job]:
    """Every job of the full matrix, skipping what makes no sense (a middle rank of two,
    a 2-D mesh of two ranks)."""
    jobs: list[Job] = []
    for fault in FAULT_TYPES:
        seen: set[str] = set()
        for launcher, world, where in PLACEMENTS:
            if world < fault.min_world or (where == "middle" and world < 3):
                continue
            culprit = None if fault.every_rank else position(where, world)
            job = Job(fault, world, launcher, culprit)
            if job.id not in seen:
                seen.add(job.id)
                jobs.append(job)
    return jobs


def slice_jobs() -> list[tuple[Job, tuple[str, ...]]]:
    by_id = {job.id: job for job in matrix()}
    return [(by_id[job_id], ways) for job_id, ways in SLICE.items()]


def marker_lines(script: Path, marker: str) -> list[int]:
    """1-based lines of the script that carry the comment ``# triage: <marker>``."""
    pat = re.compile(r"#\s*triage:\s*(\S+)")
    return [
        i
        for i, line in enumerate(script.read_text().splitlines(), start=1)
        if (m := pat.search(line)) and m.group(1) == marker
    ]


# -- running one job ----------------------------------------------------------------------


class Launch:
    """One job under its launcher; every process it started is killed by close().

    `plain` is a RankJob (rank logs rank{N}.log). torchrun and spawn run as one launcher
    process (its output in launcher.log) whose whole tree is killed on close: torchrun puts
    each worker in a session of its own, so a process group is not enough.
    """

    def __init__(self, job: Job, root: Path, timeout_s: float) -> None:
        self.job, self.root = job, root
        self.logs, self.fr, self.probe = root / "logs", root / "fr", root / "probe"
        self.run_dir = root / "run"
        for folder in (self.logs, self.fr, self.probe, self.run_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.env = {
            "FAULT_CULPRIT": str(job.culprit or 0),
            "FAULT_TIMEOUT_S": f"{timeout_s:g}",
            "TRIAGE_FR_DIR": str(self.fr),
            "TRIAGE_DUMP_DIR": str(self.probe),
            "TMPDIR": str(self.run_dir),  # the FIFO fault's pipe lives here
            **job.fault.env,
        }
        self.ranks: RankJob | None = None
        self.launcher: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._tree: list[psutil.Process] = []

    def start(self) -> None:
        if self.job.launcher == "plain":
            self.ranks = RankJob(self.job.script, self.job.world, self.env, log_dir=self.logs)
            self.ranks.start()
            return
        port = str(free_port())
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **self.env)
        if self.job.launcher == "torchrun":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node"]
            cmd += [str(self.job.world), "--master-port", port, str(self.job.script)]
        else:
            env.update(
                FAULT_LAUNCH="spawn",
                WORLD_SIZE=str(self.job.world),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            cmd = [sys.executable, str(self.job.script)]
        self._log = open(self.logs / "launcher.log", "wb")  # noqa: SIM115
        self.launcher = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.run_dir,
            preexec_fn=die_with_parent_process,
        )

    def close(self) -> None:
        if self.ranks is not None:
            self.ranks.close()
        if self.launcher is not None:
            self._kill_tree(self.launcher)
        if self._log is not None:
            self._log.close()

    def _kill_tree(self, launcher: subprocess.Popen[bytes]) -> None:
        """SIGKILL the launcher's group and every process below it, then reap them."""
        with contextlib.suppress(psutil.Error):
            self._tree += psutil.Process(launcher.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(launcher.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            launcher.wait(timeout=30)
        for proc in list(self._tree):
            with contextlib.suppress(psutil.Error):
                self._tree += proc.children(recursive=True)
        for proc in self._tree:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(self._tree, timeout=10)

    def __enter__(self) -> Launch:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state --------------------------------------------------------------------------
    def rank_pids(self) -> list[int]:
        """The rank processes still alive (zombies are not), in rank order for `plain`."""
        if self.ranks is not None:
            return [self.ranks.pids[r] for r in self.ranks.live_ranks()]
        assert self.launcher is not None
        try:
            children = psutil.Process(self.launcher.pid).children()
        except psutil.Error:
            return []
        found = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                cmd = " ".join(child.cmdline())
                if child.status() != psutil.STATUS_ZOMBIE and (
                    str(self.job.script) in cmd or "spawn_main" in cmd
                ):
                    found.append(child.pid)
                    if child not in self._tree:
                        self._tree.append(child)
        return found

    def exited(self) -> dict[int, int]:
        """rank -> exit code of the ranks that are gone (`plain` only: launchers tear the
        whole job down)."""
        return self.ranks.exited_ranks() if self.ranks is not None else {}

    def ended(self) -> bool:
        if self.ranks is not None:
            return not self.ranks.live_ranks()
        assert self.launcher is not None
        return self.launcher.poll() is not None

    def settled(self) -> bool:
        """Done for the logs way: every rank that can time out has exited (under a
        launcher, the launcher has: it tears the job down and reports last)."""
        if self.ranks is None or not self.job.fault.stays:
            return self.ended()
        return set(self.ranks.live_ranks()) <= {self.job.culprit}

    def armed(self) -> int:
        return sum(
            path.read_text(errors="replace").count(ARMED_LINE) for path in self.logs.glob("*.log")
        )

    def hang_args(self) -> list[str]:
        if self.launcher is not None:
            return ["--launcher-pid", str(self.launcher.pid)]
        return ["--pids", *map(str, self.rank_pids())]

    def tail(self, n: int = 12) -> str:
        parts = []
        for path in sorted(self.logs.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()
            parts.append(f"--- {path.name}\n" + "\n".join(lines[-n:]))
        return "\n".join(parts)


def signatures(pids: Sequence[int]) -> dict[int, tuple[Any, ...]] | None:
    """Each rank's main-thread stack; None if one could not be read this time. A stopped
    process cannot be dumped by py-spy, and cannot move either."""
    out: dict[int, tuple[Any, ...]] = {}
    for pid in pids:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                out[pid] = ("stopped",)
                continue
            out[pid] = stack_signature(json.loads(py_spy_dump(pid)), pid)
        except (psutil.Error, subprocess.SubprocessError, ValueError):
            return None
    return out if all(out.values()) else None


def wait_stalled(launch: Launch, deadline: float) -> str | None:
    """Poll until every rank printed ARMED and two stack reads in a row agree; None then,
    else why the job did not get there."""
    previous: dict[int, tuple[Any, ...]] | None = None
    while True:
        if launch.ended():
            return "the job ended instead of hanging"
        if launch.exited():
            return f"rank(s) {launch.exited()} exited before the job stalled"
        current = None
        if launch.armed() >= launch.job.world:
            pids = launch.rank_pids()
            if len(pids) == launch.job.world:
                current = signatures(pids)
        if current is not None and current == previous:
            return None
        previous = current
        if time.monotonic() >= deadline:
            return "the job did not stall in time"
        time.sleep(POLL_S)


def wait_until(done: Callable[[], bool], deadline: float) -> bool:
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def run_triage(args: Sequence[str], deadline: float) -> tuple[dict[str, Any] | None, str]:
    """A `triage` command's JSON report, or None and why not."""
    cmd = [str(Path(sys.executable).parent / "triage"), *args]
    try:
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=max(5.0, min(180.0, deadline - time.monotonic())),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"`triage {args[0]}` timed out"
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"`triage {args[0]}` exit {done.returncode}: {last[:200]}"
    return report, ""


# -- scoring ------------------------------------------------------------------------------


@dataclass
class Score:
    """One way of one job: what was expected, what the top hypothesis said, what was right."""

    job: str
    fault: str
    launcher: str
    world: int
    way: str
    expected: str
    accept: list[str]
    ranks: list[int]
    lines: list[int] | None  # None: the way cannot show the line; not scored
    got: str | None = None
    got_ranks: list[int] = field(default_factory=list)
    location: str = ""
    other_locations: list[str] = field(default_factory=list)
    confidence: float | None = None
    summary: str = ""
    cause_ok: bool = False
    ranks_ok: bool = False
    line_ok: bool | None = None
    error: str = ""  # the job misbehaved: nothing to score
    seconds: float = 0.0
    triage: str = ""  # the checkout's revision when the job started (see revision())

    @property
    def all_ok(self) -> bool:
        return self.cause_ok and self.ranks_ok and self.line_ok is not False


def expectation(job: Job, way: str) -> Score:
    fault = job.fault
    accept = fault.accept | fault.accept_on.get(way, frozenset())
    lines = None if way in fault.blind else job.lines()
    return Score(job.id, fault.name, job.launcher, job.world, way, fault.cause, sorted(accept),
                 job.ranks, lines)  # fmt: skip


def _where(loc: Mapping[str, Any] | None) -> str:
    if not loc:
        return ""
    return f"{loc.get('file')}:{loc.get('line')}"


def judge(score: Score, job: Job, report: dict[str, Any]) -> Score:
    hypotheses = report.get("hypotheses") or []
    if not hypotheses:
        score.line_ok = None if score.lines is None else False
        return score
    top = hypotheses[0]
    loc = top.get("location") or {}
    score.got = top.get("cause_id")
    score.got_ranks = sorted(top.get("ranks") or [])
    score.location = _where(loc)
    score.other_locations = [_where(x) for x in top.get("other_locations") or [] if x]
    score.confidence = top.get("confidence")
    score.summary = str(top.get("summary", ""))[:300]
    score.cause_ok = score.got in {score.expected, *score.accept}
    score.ranks_ok = score.got_ranks == score.ranks
    if score.lines is not None:
        same_file = Path(str(loc.get("file", ""))).name == job.script.name
        score.line_ok = same_file and loc.get("line") in score.lines
    return score


def revision() -> str:
    """The commit of the checkout triage is imported from, `+dirty` with uncommitted
    changes: triage may change while a long matrix runs, and verdicts from two versions
    must not be read as one. (To pin one, run against a clone: PYTHONPATH=CLONE.)"""
    checkout = Path(triage.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(checkout),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "triage",
                "tools",
                "playbooks",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def run_job(
    job: Job, ways: Sequence[str], timeout_s: float, keep: Path | None = None
) -> list[Score]:
    """Run the job once and score it on each asked way that applies; always clean up.
    With `keep`, its logs, dumps and triage's reports are copied there first."""
    ways = [w for w in WAYS if w in ways and w in job.fault.ways]
    started = time.monotonic()
    deadline = started + timeout_s + SLACK_S
    scores = {way: expectation(job, way) for way in ways}
    at = revision()
    for score in scores.values():
        score.triage = at
    root = Path(tempfile.mkdtemp(prefix="triage-fault-"))
    try:
        with Launch(job, root, timeout_s) as launch:
            _ACTIVE.add(launch)
            try:
                _score_ways(launch, scores, deadline)
            finally:
                _ACTIVE.discard(launch)
        if keep is not None:
            dest = keep / job.id.replace("/", "_")
            shutil.copytree(root, dest, ignore=shutil.ignore_patterns("run"), dirs_exist_ok=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for score in scores.values():
        score.seconds = round(time.monotonic() - started, 1)
    return list(scores.values())


def _score_ways(launch: Launch, scores: dict[str, Score], deadline: float) -> None:
    """live, then fr, while the job hangs; then logs, once the gloo timeout has fired."""
    hung = [way for way in ("live", "fr") if way in scores]
    if hung:
        why = wait_stalled(launch, deadline)
        if why is not None:
            for way in hung:
                scores[way].error = f"{why}\n{launch.tail()}"
        else:
            before = launch.rank_pids()
            if "live" in scores:
                _verdict(launch, scores["live"], ["hang", "--json", *launch.hang_args()], deadline)
            if "fr" in scores:
                request_snapshots(before, wait_s=PROBE_WAIT_S)
                if any(launch.fr.iterdir()):
                    _verdict(launch, scores["fr"], ["analyze", "--json", str(launch.fr)], deadline)
                else:
                    scores["fr"].error = "no rank wrote a Flight Recorder dump"
            if launch.rank_pids() != before:
                for way in hung:
                    scores[way].error = scores[way].error or (
                        "a rank exited while triage looked: the gloo timeout fired early"
                        " (raise --timeout)"
                    )
    if "logs" in scores:
        if wait_until(launch.settled, deadline):
            _verdict(launch, scores["logs"], ["analyze", "--json", str(launch.logs)], deadline)
        else:
            scores["logs"].error = f"the ranks did not time out in time\n{launch.tail()}"


def _verdict(launch: Launch, score: Score, args: list[str], deadline: float) -> None:
    """Run triage, keep its report beside the job's evidence, and judge it."""
    report, err = run_triage(args, deadline)
    if report is None:
        score.error = err
        return
    (launch.root / f"report-{score.way}.json").write_text(json.dumps(report, indent=1))
    judge(score, launch.job, report)


_ACTIVE: set[Launch] = set()  # closed by run_all on any exit, whatever its threads do


def run_all(
    jobs: Sequence[tuple[Job, Sequence[str]]],
    parallel: int,
    timeout_s: float,
    keep: Path | None = None,
    json_out: Path | None = None,
    earlier: Sequence[Score] = (),
    quiet: bool = False,
) -> list[Score]:
    """Run the jobs, `parallel` at a time, one progress line per job on stderr; return
    their scores. With `json_out`, every score so far (`earlier` first) is saved there
    after each job, so a run killed half-way keeps what it finished (see --resume)."""
    lock = threading.Lock()
    finished: list[str] = []
    collected = list(earlier)

    def one(item: tuple[Job, Sequence[str]]) -> list[Score]:
        job, ways = item
        try:
            scores = run_job(job, ways, timeout_s, keep)
        except Exception as exc:  # one broken job must not end the matrix
            scores = [
                expectation(job, way) for way in WAYS if way in ways and way in job.fault.ways
            ]
            for score in scores:
                score.error = f"the benchmark failed on this job: {exc!r}"
        with lock:
            finished.append(job.id)
            collected.extend(scores)
            if json_out is not None:
                save(json_out, collected)
            if not quiet:
                marks = " ".join(f"{s.way}:{_mark(s)}" for s in scores)
                secs = scores[0].seconds if scores else 0.0
                print(
                    f"[{len(finished):3}/{len(jobs)}] {job.id:<36} {marks}  {secs:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
        return scores

    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    try:
        results = list(pool.map(one, jobs))
    finally:  # on Ctrl-C too: kill the running jobs first, so their threads end at once
        for launch in list(_ACTIVE):
            launch.close()
        pool.shutdown(wait=True, cancel_futures=True)
    return [s for scores in results for s in scores]


def save(path: Path, scores: Sequence[Score]) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps([asdict(s) for s in scores], indent=1))
    part.replace(path)


def load(path: Path) -> list[Score]:
    return [Score(**row) for row in json.loads(path.read_text())]


def _mark(score: Score) -> str:
    if score.error:
        return "ERR"
    return "".join(
        "-" if ok is None else ("+" if ok else "x")
        for ok in (score.cause_ok, score.ranks_ok, score.line_ok)
    )


# -- reporting ------------------------------------------------------------------------------


def _frac(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "-"


def fault_table(scores: Sequence[Score]) -> list[str]:
    """Per fault type and way: jobs scored, cause right, ranks right, line right, all."""
    head = f"{'fault type':<20} {'way':<5} {'jobs':>4}  {'cause':>7} {'ranks':>7} {'line':>7} {'all':>7}  errors"
    lines = [head]
    order = [f.name for f in FAULT_TYPES]
    keys = sorted(
        {(s.fault, s.way) for s in scores}, key=lambda k: (order.index(k[0]), WAYS.index(k[1]))
    )
    for fault, way in [*keys, ("all", "live"), ("all", "fr"), ("all", "logs"), ("all", "all")]:
        rows = [s for s in scores if fault in ("all", s.fault) and way in ("all", s.way)]
        ok = [s for s in rows if not s.error]
        if not rows:
            continue
        n = len(ok)
        lined = [s for s in ok if s.line_ok is not None]
        lines.append(
            f"{fault:<20} {way:<5} {n:>4}  {_frac(sum(s.cause_ok for s in ok), n):>7}"
            f" {_frac(sum(s.ranks_ok for s in ok), n):>7}"
            f" {_frac(sum(bool(s.line_ok) for s in lined), len(lined)):>7}"
            f" {_frac(sum(s.all_ok for s in ok), n):>7}  {len(rows) - n or ''}"
        )
    return lines


def calibration_table(scores: Iterable[Score]) -> list[str]:
    """Per confidence bucket of the top hypothesis: verdicts, share with the right cause,
    share with cause, ranks and (where scored) line right."""
    rated = [s for s in scores if not s.error and s.confidence is not None]
    lines = [f"{'confidence':<11} {'verdicts':>8}  {'cause right':<16} all right"]
    for low, high in BUCKETS:
        rows = [s for s in rated if low <= (s.confidence or 0.0) < high]
        label = f">= {low:.1f}" if high > 1 else f"{low:.1f}-{high:.1f}"
        lines.append(
            f"{label:<11} {len(rows):>8}  {_share(sum(s.cause_ok for s in rows), len(rows)):<16}"
            f" {_share(sum(s.all_ok for s in rows), len(rows))}"
        )
    return lines


def _share(part: int, whole: int) -> str:
    return f"{part / whole:4.0%} ({part}/{whole})" if whole else "   -"


def misses(scores: Iterable[Score]) -> list[str]:
    lines = []
    for s in scores:
        if s.error or s.all_ok:
            continue
        wrong = [
            name
            for name, ok in (("cause", s.cause_ok), ("ranks", s.ranks_ok), ("line", s.line_ok))
            if ok is False
        ]
        want = f"{s.expected} ranks {s.ranks}" + (f" lines {s.lines}" if s.lines else "")
        conf = "-" if s.confidence is None else f"{s.confidence:.2f}"
        where = Path(s.location).name if s.location else "-"
        got = f"{s.got or 'no hypothesis'} ranks {s.got_ranks} at {where} conf {conf}"
        lines.append(f"{s.job} [{s.way}] wrong {'/'.join(wrong)}: expected {want}; got {got}")
        if s.line_ok is False and any(_line_in(loc, s) for loc in s.other_locations):
            lines.append("    (the expected line is among other_locations)")
        if s.summary:
            lines.append(f"    {s.summary[:240]}")
    return lines


def _line_in(loc: str, score: Score) -> bool:
    name, _, line = loc.rpartition(":")
    script = next(f.script for f in FAULT_TYPES if f.name == score.fault)
    return Path(name).name == script and line.isdigit() and int(line) in (score.lines or [])


def errors(scores: Iterable[Score]) -> list[str]:
    out = []
    for s in scores:
        if s.error:
            first, _, rest = s.error.partition("\n")
            out.append(f"{s.job} [{s.way}]: {first}")
            out += [f"    {line}" for line in rest.splitlines()[-8:]]
    return out


def render(scores: Sequence[Score]) -> str:
    parts = ["Per fault type and way", *fault_table(scores), ""]
    parts += ["Calibration (top hypothesis, all scored verdicts)", *calibration_table(scores), ""]
    missed = misses(scores)
    parts += [f"Misses ({sum(not s.error and not s.all_ok for s in scores)})", *missed, ""]
    failed = errors(scores)
    if failed:
        parts += [f"Job errors ({sum(bool(s.error) for s in scores)})", *failed, ""]
    return "\n".join(parts)


def select(
    filter_: str | None, ways: Sequence[str], slice_: bool
) -> list[tuple[Job, tuple[str, ...]]]:
    if slice_:
        chosen = [(job, tuple(w for w in w_ if w in ways)) for job, w_ in slice_jobs()]
    else:
        chosen = [(job, tuple(ways)) for job in matrix()]
    return [(job, w) for job, w in chosen if not filter_ or filter_ in job.id]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="Jobs run at once (default 2).")
    parser.add_argument("--filter", help="Only jobs whose id contains this.")
    parser.add_argument("--ways", default=",".join(WAYS), help="Comma list of live,fr,logs.")
    parser.add_argument("--slice", action="store_true", help="The small fixed CI slice.")
    parser.add_argument("--json", type=Path, help="Write every per-job score here.")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="Keep the scores already in the --json file and run only the other jobs.",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help=f"Gloo timeout of the jobs, s (default {TIMEOUT_S:g}; {SLICE_TIMEOUT_S:g} with --slice).",
    )
    parser.add_argument("--list", action="store_true", help="Print the job ids and exit.")
    parser.add_argument(
        "--keep", type=Path, help="Copy each job's logs, dumps and triage reports here."
    )
    args = parser.parse_args(argv)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways {sorted(unknown)}; choose from {', '.join(WAYS)}")
    jobs = select(args.filter, ways, args.slice)
    if args.resume and args.json is None:
        parser.error("--resume needs --json")
    earlier = load(args.json) if args.resume and args.json.exists() else []
    jobs = [(job, w) for job, w in jobs if job.id not in {s.job for s in earlier}]
    if args.list:
        print("\n".join(f"{job.id}  {','.join(w for w in WAYS if w in job.fault.ways and w in ws)}"
                        for job, ws in jobs))  # fmt: skip
        return 0
    started = time.monotonic()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    timeout_s = args.timeout or (SLICE_TIMEOUT_S if args.slice else TIMEOUT_S)
    scores = [*earlier, *run_all(jobs, args.jobs, timeout_s, args.keep, args.json, earlier)]
    print(render(scores))
    resumed = len({s.job for s in earlier})
    print(
        f"{len({s.job for s in scores})} jobs, {len(scores)} verdicts"
        + (f" ({resumed} jobs from the earlier run)" if resumed else "")
        + f"; this run took {time.monotonic() - started:.0f}s"
    )
    seen = sorted({s.triage for s in scores})
    print(
        f"triage revision: {', '.join(seen)}"
        + (" (it changed during the run)" if len(seen) > 1 else "")
    )
    if args.json:
        save(args.json, scores)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
