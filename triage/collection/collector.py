"""`triage collect`: one node's part of a job, as one document for a merge elsewhere.

It runs the hang playbook's own steps on this node's ranks (rank discovery, environment,
py-spy stacks, the logs and dumps given), so a merge is the concatenation of what
`triage hang` would have gathered on each node. It never imports torch and only reads:
py-spy pauses each process for the moment of the dump; nothing is signalled.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from triage import __version__
from triage.collection.document import MAX_EVIDENCE, Collection, Selection
from triage.engine import found_evidence, gather, job_targets
from triage.models import Evidence, Gap
from triage.observations import RankProcess, RankState
from triage.playbooks import select_playbook
from triage.plugins import load_all
from triage.readers.processes import job_processes
from triage.redact import redact_text


def collect(
    selection: Selection,
    paths: list[str],
    node: str | None,
    timeout_s: float,
    plugin_dirs: list[Path] | None = None,
) -> tuple[Collection, bool]:
    """This node's collection, and whether it holds any evidence at all.

    The node's name is `node`, else SLURMD_NODENAME, else the host's name; a Slurm step's
    tasks are kept only on their own node (SLURMD_NODENAME) where several share a host.
    """
    started, at = time.perf_counter(), datetime.now(UTC)
    host = socket.gethostname()
    slurm_node = node or os.environ.get("SLURMD_NODENAME")
    name = slurm_node or host
    targets, gaps = _targets(selection, paths, timeout_s, slurm_node, name)
    playbook, _ = select_playbook("hang", plugin_dirs)
    load_all(plugin_dirs, set())  # tools only: the rules run where the nodes are merged
    report = gather(playbook, targets)
    report.gaps[:0] = gaps
    evidence = [_redacted(item) for item in report.evidence[:MAX_EVIDENCE]]
    if len(report.evidence) > MAX_EVIDENCE:
        left = len(report.evidence) - MAX_EVIDENCE
        report.gaps.append(Gap(source=name, reason=f"{left} evidence items left out (bounded)"))
    ranks = sorted(
        {e.rank for e in evidence if e.kind == RankState.EVIDENCE_KIND and e.rank is not None}
    )
    collection = Collection(
        collector_version=__version__,
        host=host,
        node=name,
        collected_at=at,
        duration_s=round(time.perf_counter() - started, 3),
        selection=selection,
        ranks=ranks,
        evidence=evidence,
        gaps=report.gaps,
        tool_runs=report.tool_runs,
        notes=report.notes,
    )
    return collection, found_evidence(report)


def _targets(
    selection: Selection,
    paths: list[str],
    timeout_s: float,
    slurm_node: str | None,
    name: str,
) -> tuple[dict[str, Any], list[Gap]]:
    """The hang playbook's targets for this node's ranks (never their peers on the host:
    with `peers` off, another node's ranks are not this node's missing ones)."""
    member = _membership(selection, slurm_node)
    pids = job_processes(member) if member is not None else selection.pids
    targets = job_targets(paths, pids, selection.launcher_pid, timeout_s=timeout_s)
    targets["peers"] = False
    gaps = []
    if member is not None and not pids:
        gaps.append(
            Gap(
                source=name,
                reason=f"no process on this node is a rank of {selection.describe()}",
                hint="check the id on a rank: `tr '\\0' '\\n' < /proc/PID/environ`; reading"
                " another user's processes needs their user or root",
            )
        )
    return targets, gaps


def _membership(
    selection: Selection, slurm_node: str | None
) -> Callable[[dict[str, str]], bool] | None:
    """Whether an environment belongs to the job the selection names (None: pids given)."""
    if selection.slurm_job:
        job, _, step = selection.slurm_job.partition(".")

        def in_step(env: dict[str, str]) -> bool:
            if env.get("SLURM_JOB_ID") != job or "SLURM_STEP_ID" not in env:
                return False  # another job, or the batch script and its srun (no step)
            if step and env["SLURM_STEP_ID"] != step:
                return False
            return not slurm_node or env.get("SLURMD_NODENAME", slurm_node) == slurm_node

        return in_step
    if selection.run_id:
        return lambda env: env.get("TORCHELASTIC_RUN_ID") == selection.run_id
    if selection.master:
        addr, _, port = selection.master.rpartition(":")
        return lambda env: env.get("MASTER_ADDR") == addr and env.get("MASTER_PORT") == port
    return None


def _redacted(item: Evidence) -> Evidence:
    """Credential shapes out of what leaves the node (the environment is redacted as read)."""
    update: dict[str, Any] = {}
    if item.excerpt:
        update["excerpt"] = redact_text(item.excerpt)
    if item.kind == RankProcess.EVIDENCE_KIND and item.data.get("cmdline"):
        update["data"] = {**item.data, "cmdline": redact_text(str(item.data["cmdline"]))}
    return item.model_copy(update=update) if update else item
