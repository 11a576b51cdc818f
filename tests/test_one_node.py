"""`triage hang` on one node of a larger job: the ranks elsewhere are named as not inspected,
with the command that reaches them, and no local victim is blamed for a culprit it cannot see.

A real 4-rank gloo job whose environment says it spans two nodes of two ranks (rank 2, on
the second node, waits for a shard file while the others wait in all_reduce); triage is
given the first node's pids only. Its peers on this host say they are another node's.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from tests.conftest import hang_report, requires_torch, wait_for_environ
from triage.observations import RankProcess, UnseenRanks
from triage.readers.processes import missing_ranks, spans_hosts
from triage.registry import REGISTRY
from triage.scenarios import RankJob, free_port

HOST = socket.gethostname()


def torchrun_node(rank: int) -> Mapping[str, str]:
    """What torchrun sets on a node of `--nnodes 2 --nproc-per-node 2`."""
    return {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": str(rank % 2), "GROUP_RANK": str(rank // 2)}


def slurm_task(job: str) -> Callable[[int], Mapping[str, str]]:
    """What `srun --nodes 2 --ntasks-per-node 2` sets (and a wrapper's RANK, no local size)."""

    def env(rank: int) -> Mapping[str, str]:
        return {
            "LOCAL_WORLD_SIZE": "",
            "LOCAL_RANK": str(rank % 2),
            "SLURM_JOB_ID": job,
            "SLURM_STEP_ID": "0",
            "SLURM_NNODES": "2",
            "SLURM_NTASKS": "4",
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank % 2),
            "SLURM_NODEID": str(rank // 2),
        }

    return env


@pytest.mark.scenario
@requires_torch
@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
def test_one_node_of_two_blames_no_local_rank_and_says_how_to_reach_the_rest(
    launcher: str,
) -> None:
    job_id = "77" + uuid.uuid4().hex[:6].translate(str.maketrans("abcdef", "123456"))
    layout = torchrun_node if launcher == "torchrun" else slurm_task(job_id)
    with RankJob("rank_not_in_collective", rank_env=layout) as job:
        job.wait_until_stalled()
        report = hang_report(job.pids[:2])
        if launcher == "slurm":
            command = f"`triage hang --slurm-job {job_id}.0`"
        else:
            command = f"`triage collect --master 127.0.0.1:{job.port} > $(hostname).json`"
    hypotheses = report["hypotheses"]
    top = hypotheses[0]
    assert top["cause_id"] == "hang.unknown", hypotheses
    assert all(not {0, 1} & set(h["ranks"]) for h in hypotheses), hypotheses
    assert "ranks 2-3 run on other hosts and were not inspected" in top["summary"]
    assert "likely among them" in top["summary"]
    assert command in top["fix"]

    unseen = [g for g in report["gaps"] if "ranks 2-3 are not on this host" in g["reason"]]
    assert len(unseen) == 1 and "were not inspected" in unseen[0]["reason"], report["gaps"]
    assert command in unseen[0]["hint"]
    assert any(command in step for step in report["next_steps"]), report["next_steps"]
    if launcher == "torchrun":
        assert "`triage hang --collections FOLDER`" in unseen[0]["hint"]
        assert "LOCAL_WORLD_SIZE is 2 of WORLD_SIZE 4" in unseen[0]["reason"]
    else:
        assert "SLURM_NNODES is 2" in unseen[0]["reason"]

    seen = sorted(e["rank"] for e in report["evidence"] if e["kind"] == "process")
    assert seen == [0, 1]  # rank 2-3's processes here say they are the other node's
    assert not [e for e in report["evidence"] if e["kind"] == "missing_rank"]
    said = json.dumps([hypotheses, report["gaps"], report["next_steps"]])
    assert "exited" not in said and "missing" not in said


def process(rank: int, world: int = 4, **fields: Any) -> RankProcess:
    return RankProcess(pid=1000 + rank, rank=rank, world_size=world, host=HOST, **fields)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"local_world_size": 4, "master": "127.0.0.1:29500"}, None),
        ({"master": "127.0.0.1:29500"}, None),
        ({"master": f"{HOST}:29500"}, None),
        ({}, None),
        ({"local_world_size": 4, "master": "10.255.0.1:29500"}, None),
        ({"local_world_size": 2, "master": "127.0.0.1:29500"}, "LOCAL_WORLD_SIZE is 2 of"),
        ({"group_rank": 1, "master": "127.0.0.1:29500"}, "GROUP_RANK (or SLURM_NODEID) is 1"),
        ({"nodes": 2}, "SLURM_NNODES is 2"),
        ({"master": "10.255.0.1:29500"}, "MASTER_ADDR 10.255.0.1 is another host"),
        ({"master": "trainer-master-0.svc:29500"}, "MASTER_ADDR trainer-master-0.svc"),
    ],
)
def test_larger_than_this_host_is_what_the_ranks_say(
    fields: dict[str, Any], why: str | None
) -> None:
    ranks = [process(0, **fields), process(1, **fields)]
    said = spans_hosts(ranks, HOST)
    assert (said is None) if why is None else (said is not None and why in said), said
    missing, elsewhere = missing_ranks(ranks, HOST)
    if why is None:  # the job fits here: a rank with no process is missing
        assert ([m.rank for m in missing], elsewhere) == ([2, 3], [])
    else:  # it does not: ranks 2-3 are elsewhere, not missing
        assert ([m.rank for m in missing], elsewhere) == ([], [2, 3])


@contextmanager
def first_node(extra: dict[str, str]) -> Iterator[list[int]]:
    """Ranks 0-1 of a 2x2 job as plain sleeping processes: discovery reads only their
    environment (and nothing of this process's)."""
    port = str(free_port())
    procs = []
    try:
        for rank in (0, 1):
            env = {"PATH": "/usr/bin:/bin", "RANK": str(rank), "WORLD_SIZE": "4"}
            env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "GROUP_RANK": "0"}
            env |= {"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"} | extra
            code = "import time\nwhile True:\n    time.sleep(1)\n"
            procs.append(subprocess.Popen([sys.executable, "-c", code], env=env))
        wait_for_environ(p.pid for p in procs)
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    ("extra", "command"),
    [
        ({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"}, "`triage hang --slurm-job 4242.3`"),
        ({"SLURM_JOB_ID": "4242"}, "`triage hang --slurm-job 4242`"),
        ({"TRIAGE_DEBUG_SERVER_PORT": "25999"}, "`triage hang --debug-server 127.0.0.1:25999`"),
        ({"TORCHELASTIC_RUN_ID": "run 7"}, "`triage collect --run-id 'run 7' > $(hostname).json`"),
        ({}, "`triage collect --master 127.0.0.1:"),
    ],
)
def test_the_command_that_reaches_the_other_nodes(extra: dict[str, str], command: str) -> None:
    with first_node(extra) as pids:
        run = REGISTRY.run("discover_ranks", {"pids": pids})
    unseen = [UnseenRanks.model_validate(e.data) for e in run.evidence if e.kind == "unseen_ranks"]
    assert [u.ranks for u in unseen] == [[2, 3]] and command in unseen[0].reach
    assert [g.hint for g in run.gaps] == [unseen[0].reach]
    assert not [e for e in run.evidence if e.kind == "missing_rank"]


def test_live_processes_of_unknown_rank_may_hold_every_absent_rank() -> None:
    """mp.spawn's ranks carry no RANK: four live processes of a 4-rank world are not four
    missing ranks (their stacks tell their ranks later)."""
    spawned = [RankProcess(pid=2000 + n, world_size=4, host=HOST) for n in range(4)]
    assert missing_ranks(spawned, HOST) == ([], [])
    one_named = [process(0, world=4), *spawned[:2]]
    assert [m.rank for m in missing_ranks(one_named, HOST)[0]] == [1, 2, 3]
