"""`triage run -- COMMAND...`: run a job with debugging on, watch it, triage it when it breaks.

Everything lands in one folder: the launcher's output (`launcher.log`, which the job
writes itself so it outlives this process), NCCL logs, Flight Recorder dumps, probe
snapshots and the report. When the job exits non-zero the report is built from that
folder; when it stops making progress for `hang_after` seconds (job/watch.py) the ranks'
stacks are read and Flight Recorder dumps are asked for (triage.probe's signal to the
ranks that run it, unless `--no-signal-probe`; a write to NCCL's dump pipes), then the job
is left running (exit code 3) unless `kill_on_hang`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from triage.engine import follow
from triage.job.debug_env import (
    FR_DIR,
    LAUNCHER_LOG,
    PROBE_DIR,
    JobEnvironment,
    RunError,
    job_environment,
    output_dir,
)
from triage.job.dumps import dumps_since, outside_files, trigger_nccl_pipes, wait_for_dumps
from triage.job.launch import Job, Tail, forwarding
from triage.job.probe_protocol import FR_DIR_ENV
from triage.job.probe_signal import request_snapshots
from triage.job.watch import Outcome, watch
from triage.models import Gap, Report
from triage.playbooks import run_playbook
from triage.printable import plain_text
from triage.redacted import redacted
from triage.render import render_json
from triage.render.html import render_html
from triage.render.markdown import render_markdown

HANG_EXIT_CODE = 3
DEFAULT_HANG_AFTER_S = 300.0
#: How long signalled ranks get to write their dump and snapshot: the run waited minutes
#: for the hang already, and a loaded host is slow to walk a large model.
PROBE_WAIT_S = 30.0


@dataclass
class RunOptions:
    command: list[str]
    out: Path | None = None
    hang_after: float = DEFAULT_HANG_AFTER_S
    debug_detail: bool = False
    debug_server_port: int | None = None
    kill_on_hang: bool = False
    signal_probe: bool = True
    as_json: bool = False
    redact: bool = True
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
    environment = job_environment(os.environ, out, options.debug_detail, options.debug_server_port)
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
    fr_dir = Path(environment.env.get(FR_DIR_ENV, str(out / FR_DIR))).absolute()
    notes = [
        f"the job stopped making progress after {outcome.seconds:.0f}s: every rank waited in a"
        f" collective with an unchanged stack for {options.hang_after:g}s"
    ]
    asked_at = time.time()
    gaps: list[Gap] = []
    snapshots: list[str] = []
    if options.signal_probe:
        request = request_snapshots(pids, PROBE_WAIT_S)
        snapshots, gaps = request.files, request.probe_gaps()
        if request.sent:
            notes.append(
                f"asked {len(request.sent)} ranks (pids {', '.join(map(str, request.sent))})"
                " for a Flight Recorder dump and an in-process snapshot with triage.probe's"
                f" signal ({len(snapshots)} snapshots); the job was not otherwise touched"
            )
    else:
        notes.append("no rank was signalled (--no-signal-probe)")
    if options.debug_server_port is not None:
        notes.append(
            "ranks that import triage.probe serve PyTorch's debug server: read every rank, on"
            f" every node, with `triage hang --debug-server MASTER_ADDR:{options.debug_server_port}`"
        )
    pipes = trigger_nccl_pipes(fr_dir)
    if pipes:
        wait_for_dumps(fr_dir, pipes, asked_at)
        notes.append(f"asked NCCL for a Flight Recorder dump through {pipes} dump pipes")
    if options.signal_probe and not dumps_since(fr_dir, started):
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
    hung = job.proc.poll() is None
    targets: dict[str, Any] = {
        "paths": paths,
        "command": options.command,
        "out_dir": str(out),
        "exit_code": job.proc.poll(),
        "hung": hung,
        "env_set": environment.applied,
        "env_kept": {name: theirs for name, (theirs, _) in environment.kept.items()},
    }
    if hung:  # the live ranks, for their stacks; an exited job's pids name nothing
        targets |= {"pids": pids, "launcher_pid": job.pid}
    if snapshots:
        targets["snapshot_files"] = snapshots
    notes += [f"triage run set {', '.join(environment.applied)} (values: targets.env_set)"]
    notes += environment.kept_lines()
    try:
        playbook, by_symptom = run_playbook(hung, options.plugin_dirs)
        report = follow(playbook, targets, by_symptom=by_symptom, notes=notes, gaps=gaps)
        if options.redact:  # the files are for a ticket; `show` prints this same report
            report = redacted(report)
        (out / "report.json").write_text(render_json(report) + "\n", encoding="utf-8")
        (out / "report.md").write_text(plain_text(render_markdown(report)), encoding="utf-8")
        (out / "report.html").write_text(plain_text(render_html(report)), encoding="utf-8")
        show(report)
        _say(
            f"report written to {out / 'report.md'}, {out / 'report.html'} and {out / 'report.json'}"
        )
    except Exception as exc:  # the evidence is on disk; the report is what failed
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        _say(f"error: triage failed ({first}); the job's logs and dumps are kept in {out}")
