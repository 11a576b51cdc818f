"""Process discovery: which live processes are the job's ranks, and which ranks are gone.

A rank's place in the job is in its environment (RANK, WORLD_SIZE, ... as torchrun,
SLURM wrappers and most launchers set it), read by `triage.readers.processes`. Peers of
the given pids found on this host (of the same node, by GROUP_RANK) join the analysis, so
`--pids` with one rank still sees the whole local job. The ranks of a larger job that run
on other hosts are evidence too (`unseen_ranks`): not inspected, never missing.
"""

from __future__ import annotations

import shlex
import socket

import psutil

from triage.models import Evidence, Gap
from triage.observations import MissingRank, RankProcess, UnseenRanks
from triage.readers.processes import (
    RUN_ID_PREFIX,
    Launchers,
    covers_world,
    launcher_children,
    missing_ranks,
    read_process,
    same_job_on_host,
    spans_hosts,
)
from triage.readers.pyspy import PTRACE_HINT
from triage.registry import ToolError, ToolOutput, tool
from triage.text import format_ranks


@tool(name="discover_ranks")
def discover_ranks(
    pids: list[int] | None = None, launcher_pid: int | None = None, peers: bool = True
) -> ToolOutput:
    """Find a job's rank processes (from pids or a launcher's pid) and read rank, world size,
    host and launcher from their environment; report ranks that have no live process, and
    the ranks of a job larger than this host as not inspected, with the command that
    reaches them. `peers=False` reads only the processes given, and leaves ranks not found to whoever
    merges every node's collection (`triage collect`: one node's view of a larger job)."""
    host = socket.gethostname()
    wanted = list(dict.fromkeys(pids or []))
    if launcher_pid is not None:
        wanted += [pid for pid in _launcher_children(launcher_pid) if pid not in wanted]
    if not wanted:
        raise ToolError("no processes to inspect", "pass --pids PID... or --launcher-pid PID")
    processes: list[RankProcess] = []
    gaps: list[Gap] = []
    launchers: Launchers = {}
    for pid in wanted:
        try:
            processes.append(read_process(pid, host, launchers))
        except psutil.NoSuchProcess:
            gaps.append(Gap(source=f"pid:{pid}", reason=f"pid {pid} does not exist (exited?)"))
        except psutil.AccessDenied:
            gaps.append(
                Gap(
                    source=f"pid:{pid}",
                    reason="permission denied reading its environment",
                    hint=PTRACE_HINT,
                )
            )
    job_ids = {p.job_id for p in processes if p.job_id}
    nodes = {p.group_rank for p in processes if p.group_rank is not None}
    known = all(p.group_rank is not None for p in processes)
    extra = []
    if peers and job_ids and not covers_world(processes):
        named = {p.pid for p in processes}
        extra = same_job_on_host(job_ids, named, host, nodes if known else None)
    processes += extra
    processes.sort(key=lambda p: (p.rank is None, p.rank if p.rank is not None else p.pid))
    missing, elsewhere = missing_ranks(processes, host) if peers else ([], [])

    evidence = [_process_evidence(p) for p in processes]
    if elsewhere:
        unseen = _unseen(processes, elsewhere, host)
        evidence.append(unseen)
        gaps.append(Gap(source=host, reason=unseen.summary, hint=unseen.data["reach"]))
    evidence += [
        Evidence(
            id=f"missing:rank{m.rank}" if m.rank is not None else f"missing:local{m.local_rank}",
            kind=MissingRank.EVIDENCE_KIND,
            source=host,
            rank=m.rank,
            summary=f"{_who(m)}: no live process ({m.reason})",
            data=m.model_dump(),
        )
        for m in missing
    ]
    context = {
        "pids": [p.pid for p in processes if p.status != psutil.STATUS_ZOMBIE],
        "ranks_by_pid": {p.pid: p.rank for p in processes if p.rank is not None},
    }
    notes = [f"found {len(extra)} more ranks of the same job on {host}"] if extra else []
    text = "\n".join(notes + [e.summary for e in evidence])
    return ToolOutput(evidence=evidence, gaps=gaps, context=context, text=text)


def _process_evidence(p: RankProcess) -> Evidence:
    who = f"rank {p.rank}" if p.rank is not None else f"pid {p.pid} (rank unknown)"
    launched = f", launched by {p.launcher}" if p.launcher else ""
    world = f"/{p.world_size}" if p.world_size else ""
    return Evidence(
        id=f"process:{p.pid}",
        kind=RankProcess.EVIDENCE_KIND,
        source=f"pid:{p.pid}",
        rank=p.rank,
        summary=f"{who}{world} is pid {p.pid} on {p.host} ({p.status}{launched})",
        data=p.model_dump(),
    )


def _unseen(processes: list[RankProcess], ranks: list[int], host: str) -> Evidence:
    """The ranks on other hosts, why the job is taken to span them, and how to reach them."""
    unseen = UnseenRanks(
        ranks=ranks,
        world_size=max(p.world_size or 0 for p in processes),
        host=host,
        why=spans_hosts(processes, host) or "",
        reach=_reach(processes),
    )
    return Evidence(
        id="unseen:ranks",
        kind=UnseenRanks.EVIDENCE_KIND,
        source=host,
        summary=f"ranks {format_ranks(ranks)} are not on this host and were not inspected"
        f" ({unseen.why})",
        data=unseen.model_dump(),
    )


def _reach(processes: list[RankProcess]) -> str:
    """The command that reaches every rank: Slurm's own fan-out, else the debug server the
    ranks started, else `triage collect` on every node and a merge."""
    steps = sorted({p.slurm_job for p in processes if p.slurm_job})
    if len(steps) == 1:
        return (
            f"run `triage hang --slurm-job {steps[0]}` where Slurm's commands work (this node or"
            " the login node): it collects every node of the job at once"
        )
    master = next((p.master for p in processes if p.master), None)
    ports = sorted({p.debug_server_port for p in processes if p.debug_server_port})
    if master and len(ports) == 1:
        addr = master.rpartition(":")[0]
        return (
            f"run `triage hang --debug-server {addr}:{ports[0]}` from a host that reaches rank 0:"
            " the ranks' debug server serves every rank's stacks"
        )
    job = next((p.job_id for p in processes if p.job_id), None)
    if job is None:
        select = "--pids PID..."
    elif job.startswith(RUN_ID_PREFIX):
        select = f"--run-id {shlex.quote(job.removeprefix(RUN_ID_PREFIX))}"
    else:
        select = f"--master {shlex.quote(job)}"
    return (
        f"run `triage collect {select} > $(hostname).json` on every node of the job (srun,"
        " kubectl exec, pdsh, ssh), put the files in one folder and run"
        " `triage hang --collections FOLDER`"
    )


def _who(m: MissingRank) -> str:
    return f"rank {m.rank}" if m.rank is not None else f"local rank {m.local_rank}"


def _launcher_children(launcher_pid: int) -> list[int]:
    try:
        return launcher_children(launcher_pid)
    except psutil.NoSuchProcess as exc:
        raise ToolError(f"launcher pid {launcher_pid} does not exist") from exc
    except psutil.AccessDenied as exc:
        raise ToolError(f"launcher pid {launcher_pid}: permission denied", PTRACE_HINT) from exc
