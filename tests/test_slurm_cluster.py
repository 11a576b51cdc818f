"""The one-host Slurm cluster behaves as `triage hang --slurm-job` will rely on.

A sleeping two-node job (two ranks per node) is found the ways the feature finds a job: its
node list from squeue, the ranks of one node from `scontrol listpids`, and a collector run on
every node inside the allocation with `srun --overlap`. If any of these stops holding (a new
Slurm, a changed recipe), the feature's own tests would fail for reasons far from triage.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.slurm_cluster import SlurmCluster

pytest_plugins = ["tests.slurm_cluster"]
# Real daemons and a real job, like the gloo scenarios; a `slurm` marker is not declared yet.
pytestmark = pytest.mark.slurm

SLEEPING_JOB = f"""#!/bin/sh
srun {sys.executable} -c 'import time; time.sleep(600)'
"""


@pytest.fixture(scope="module")
def sleeping_job(slurm_cluster: SlurmCluster) -> Iterator[int]:
    """A 2-node, 2-ranks-per-node job whose ranks have all started, cancelled afterwards."""
    job = slurm_cluster.sbatch(SLEEPING_JOB, nodes=2, ntasks_per_node=2)
    try:
        slurm_cluster.wait_running(job)
        for node in slurm_cluster.nodes:
            ranks = partial(_rank_pids, slurm_cluster, job, node)
            slurm_cluster.wait_for(ranks, 30, f"two ranks on {node}")
        yield job
    finally:
        slurm_cluster.cancel(job)


def _rank_pids(cluster: SlurmCluster, job: int, node: str) -> list[int] | None:
    """The pids of the rows of `scontrol listpids` that are ranks (a numeric global id), or
    None until both of the node's ranks have started: squeue shows the step before that
    node's slurmd knows it, and a rank's row is there, with PID -1, before it is forked."""
    try:
        out = cluster.run("scontrol", "listpids", f"{job}.0", node)
    except RuntimeError as failed:
        if "does not exist on node" in str(failed):
            return None
        raise
    ranks = [f for f in map(str.split, out.splitlines()[1:]) if len(f) == 5 and f[4].isdigit()]
    pids = [int(f[0]) for f in ranks]
    return pids if len(pids) == 2 and min(pids) > 0 else None


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if item)


def test_both_nodes_are_idle_before_any_job(slurm_cluster: SlurmCluster) -> None:
    rows = slurm_cluster.run("sinfo", "-h", "-N", "-o", "%N %T").splitlines()
    assert sorted(rows) == ["trnode-a idle", "trnode-b idle"]


def test_a_job_lists_and_expands_both_node_names(
    slurm_cluster: SlurmCluster, sleeping_job: int
) -> None:
    nodelist = slurm_cluster.run("squeue", "-h", "-j", str(sleeping_job), "-o", "%N").strip()
    assert nodelist == "trnode-a,trnode-b"
    hosts = slurm_cluster.run("scontrol", "show", "hostnames", nodelist).split()
    assert hosts == list(slurm_cluster.nodes)


def test_listpids_with_a_node_name_gives_that_nodes_ranks(
    slurm_cluster: SlurmCluster, sleeping_job: int
) -> None:
    pids = _rank_pids(slurm_cluster, sleeping_job, "trnode-b")
    assert pids is not None
    for pid in pids:
        env = _environ(pid)
        assert env["SLURMD_NODENAME"] == "trnode-b", (pid, env)
        assert env["SLURM_STEP_ID"] == "0"
        assert env["SLURM_JOB_ID"] == str(sleeping_job)
    assert sorted(int(_environ(pid)["SLURM_PROCID"]) for pid in pids) == [2, 3]


def test_an_overlapping_srun_reaches_every_node_of_a_full_job(
    slurm_cluster: SlurmCluster, sleeping_job: int
) -> None:
    out = slurm_cluster.run(
        "srun",
        "--jobid",
        str(sleeping_job),
        "--overlap",
        "-N2",
        "--ntasks-per-node=1",
        "-l",
        "sh",
        "-c",
        "echo $SLURMD_NODENAME",
        timeout=60,
    )
    by_task = dict(line.split(": ", 1) for line in out.splitlines())
    assert sorted(by_task.values()) == list(slurm_cluster.nodes), out
