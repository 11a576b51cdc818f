"""Run a wrong-results scenario: a tiny gloo job whose ranks write triage.probe snapshots.

Each scenario is one script in this folder with one planted fault that makes replicas
disagree (or, for `hung_collective`, hang). The ranks run as separate processes
(`triage.scenarios.RankJob`), each writing `logs/rank{N}.log`, with `TRIAGE_DUMP_DIR`
pointing at `probe/`, where the snapshots (and check_replicas results, and the TP job's
CommDebugMode summary) land. The hung job is left to stall, then asked for snapshots
with the signal, exactly as `triage hang --signal-probe` asks. Only the standard library
and psutil are imported here; torch runs inside the jobs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from triage.job.probe_signal import SnapshotRequest, request_snapshots
from triage.scenarios.harness import RankJob, ScenarioError

WRONG_DIR = Path(__file__).resolve().parent
PROBE_DIR = "probe"
LOG_DIR = "logs"
#: A short Flight Recorder: the dumps the hung job writes on the signal stay small.
FR_ENTRIES = "16"


@dataclass(frozen=True)
class WrongJob:
    """One planted fault: the cause it plants and how its run ends.

    ``culprits`` are the ranks whose own state is wrong (every rank when all replicas are
    equally wrong). ``fails`` says the job stops with an error after its snapshots (DDP's
    unused-parameter check, the TP forward after the bad load), ``hangs`` that it stalls.
    """

    name: str
    cause_id: str
    culprits: tuple[int, ...]
    world_size: int = 2
    fails: bool = False
    hangs: bool = False

    @property
    def script(self) -> Path:
        return WRONG_DIR / f"{self.name}.py"


WRONG_JOBS: dict[str, WrongJob] = {
    job.name: job
    for job in (
        WrongJob("unsynced_grads", "wrong.unsynced_grads", (0, 1)),
        WrongJob("unused_head", "wrong.unused_parameters", (0, 1), fails=True),
        WrongJob("tp_wrong_placement", "wrong.placement", (0,), fails=True),
        WrongJob("init_mismatch", "wrong.init_mismatch", (0, 1, 2), world_size=3),
        WrongJob("nan_one_rank", "wrong.nan", (1,)),
        WrongJob("batchnorm_unsynced", "wrong.batchnorm_sync", (0, 1)),
        WrongJob("hung_collective", "hang.mismatched_collective", (0,), hangs=True),
    )
}


@dataclass
class WrongRun:
    """What one run left in its folder, and for the hung job what the signal gave."""

    job: WrongJob
    out_dir: Path
    returncodes: dict[int, int | None]
    seconds: float
    pids: list[int]
    signal: SnapshotRequest | None = None

    @property
    def probe_dir(self) -> Path:
        return self.out_dir / PROBE_DIR

    def snapshots(self) -> list[Path]:
        return sorted(self.probe_dir.glob("triage-probe-*.json"))


def run_wrong(name: str, out_dir: str | os.PathLike[str], timeout_s: float = 180.0) -> WrongRun:
    """Run scenario `name` into `out_dir`; every rank process is gone when this returns.

    ScenarioError when a job that should finish fails, or one that should fail succeeds;
    TimeoutError (with the logs' tails) when it runs past `timeout_s`.
    """
    job = WRONG_JOBS[name]
    out = Path(out_dir).absolute()
    (out / PROBE_DIR).mkdir(parents=True, exist_ok=True)
    env = {"TRIAGE_DUMP_DIR": str(out / PROBE_DIR), "TORCH_FR_BUFFER_SIZE": FR_ENTRIES}
    started = time.monotonic()
    with RankJob(job.script, job.world_size, env=env, log_dir=out / LOG_DIR) as ranks:
        if job.hangs:
            ranks.wait_until_stalled(timeout_s=timeout_s)
            request = request_snapshots(ranks.pids, wait_s=timeout_s / 3)
            codes = {r: p.poll() for r, p in enumerate(ranks.procs)}
            return WrongRun(job, out, codes, time.monotonic() - started, ranks.pids, request)
        codes = _wait_all(ranks, started + timeout_s)
    failed = {r: c for r, c in codes.items() if c != 0}
    if failed and not job.fails:
        raise ScenarioError(
            f"{name}: ranks {sorted(failed)} failed ({failed})\n{ranks.logs_tail()}"
        )
    if not failed and job.fails:
        raise ScenarioError(f"{name}: every rank succeeded; the fault did not fire")
    return WrongRun(job, out, codes, time.monotonic() - started, ranks.pids)


def _wait_all(ranks: RankJob, deadline: float) -> dict[int, int | None]:
    for proc in ranks.procs:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(left, 0.1))
        except Exception as exc:  # subprocess.TimeoutExpired
            raise TimeoutError(f"{ranks.script.name} did not finish\n{ranks.logs_tail()}") from exc
    return {r: p.poll() for r, p in enumerate(ranks.procs)}
