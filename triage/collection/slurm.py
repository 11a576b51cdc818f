"""`triage hang --slurm-job`: every node of a Slurm job, collected by Slurm's own fan-out.

The job's nodes come from squeue (its node list, expanded by `scontrol show hostnames`).
One `srun --jobid J --overlap` step runs `triage collect` once on each of them, inside the
job's allocation (`--overlap`: the job's own step may hold every CPU). Each collector
prints its document as one line; srun's `--label` says which task wrote which line, so
lines are put back together per task. srun's `--wait` ends the collectors that are still
running some seconds after the first one finished, and the whole fan-out has a deadline:
a node whose collector failed or overran it is a gap naming that node, and its ranks are
"not seen", never "exited". Nothing is sent to the job's processes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field

from triage.collection.document import Sourced, documents_in
from triage.models import Gap
from triage.registry import ToolError
from triage.text import format_nodes

JOB_SPEC = re.compile(r"^(?P<job>\d+)(?:\.(?P<step>\d+))?$")
_LABELED = re.compile(r"^\s*(?P<task>\d+): ?(?P<text>.*)$")
#: Seconds srun and the collectors get beyond the per-node deadline: step start-up.
_STARTUP_S = 15.0
#: What a node runs; TRIAGE_COLLECTOR overrides it where nodes see another path.
COLLECTOR_VARIABLE = "TRIAGE_COLLECTOR"


@dataclass
class Fanout:
    """The documents the nodes sent, and the nodes that sent none (as gaps)."""

    nodes: list[str]
    documents: list[Sourced] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)


def job_nodes(job: str) -> list[str]:
    """The running job's node names, or a one-line error saying why there are none."""
    try:
        out = _slurm("squeue", "-h", "-j", job, "-o", "%T %N").strip()
    except ToolError as exc:
        raise ToolError(f"Slurm job {job}: {exc.reason}", exc.hint) from None
    if not out:
        raise ToolError(
            f"Slurm job {job} is not in the queue (finished, or squeue reads another cluster:"
            " check SLURM_CONF)"
        )
    state, _, nodelist = out.splitlines()[0].partition(" ")
    if state != "RUNNING" or not nodelist.strip():
        raise ToolError(f"Slurm job {job} is {state.lower()}, not running: no rank to inspect")
    return _slurm("scontrol", "show", "hostnames", nodelist.strip()).split()


def collector_command() -> list[str]:
    """`triage` as the nodes start it: this Python (the same path on a shared file system),
    or TRIAGE_COLLECTOR's words."""
    custom = os.environ.get(COLLECTOR_VARIABLE, "").strip()
    return shlex.split(custom) if custom else [sys.executable, "-m", "triage"]


def collect_job(spec: str, deadline_s: float, dump_timeout_s: float) -> Fanout:
    """Run `triage collect` on every node of the job (step) at once; read what came back."""
    found = JOB_SPEC.match(spec)
    if found is None:
        raise ToolError(f"--slurm-job is JOBID or JOBID.STEP (digits), got {spec!r}")
    job = found["job"]
    nodes = job_nodes(job)
    command = [
        "srun", "--jobid", job, "--overlap", f"--nodes={len(nodes)}", "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}", "--label", "--kill-on-bad-exit=0",
        f"--wait={max(1, round(deadline_s))}", *collector_command(), "collect",
        "--slurm-job", spec, "--timeout", f"{dump_timeout_s:g}",
    ]  # fmt: skip
    stdout, stderr, late = _run(command, deadline_s + _STARTUP_S)
    fanout = Fanout(nodes)
    for task, text in _by_task(stdout).items():
        documents, gaps = documents_in(text, f"{_node(nodes, task)} (srun task {task})")
        fanout.documents += documents
        fanout.gaps += gaps
    answered = {doc.node for _, doc in fanout.documents}
    errors = _by_task(stderr)
    silent = [n for n in nodes if n not in answered]
    for task, node in enumerate(nodes):
        if node not in silent:
            continue
        said = _last_line(errors.get(task, "")) or _last_line(stderr)
        why = "its collector overran the deadline" if late else "its collector sent nothing"
        fanout.gaps.append(
            Gap(
                source=f"node {node}",
                reason=f"{why}{': ' + said if said else ''}; its ranks were not seen",
                hint=f"run `triage collect --slurm-job {spec}` on {node} by hand",
                tool="collect_slurm_job",
            )
        )
    if not fanout.documents:
        raise ToolError(
            f"no node of Slurm job {job} ({format_nodes(nodes)}) sent a collection:"
            f" {_last_line(stderr) or 'srun printed nothing'}"
        )
    return fanout


def _slurm(*args: str) -> str:
    if shutil.which(args[0]) is None:
        raise ToolError(
            f"{args[0]} not found", "run --slurm-job where Slurm's commands are (a login node)"
        )
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{' '.join(args)} did not answer in 30 s") from exc
    if done.returncode != 0:
        said = _last_line(done.stderr) or f"exit code {done.returncode}"
        raise ToolError(f"{args[0]} failed: {said}", "check SLURM_CONF and the job id")
    return done.stdout


def _run(command: list[str], timeout_s: float) -> tuple[str, str, bool]:
    """srun's stdout and stderr, and whether it overran: what it printed until then counts."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as late:
        return _text(late.stdout), _text(late.stderr), True
    return done.stdout, done.stderr, False


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _by_task(output: str) -> dict[int, str]:
    """srun --label's lines, joined per task (a long line may arrive in pieces)."""
    parts: dict[int, list[str]] = defaultdict(list)
    for line in output.splitlines():
        found = _LABELED.match(line)
        if found is not None:
            parts[int(found["task"])].append(found["text"])
    return {task: "".join(lines) for task, lines in parts.items()}


def _node(nodes: list[str], task: int) -> str:
    """srun's block distribution puts task N on the Nth node of the list, one per node."""
    return nodes[task] if task < len(nodes) else f"task {task}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _LABELED.sub(r"\g<text>", lines[-1])[:300] if lines else ""
