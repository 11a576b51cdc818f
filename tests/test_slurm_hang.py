"""`triage hang --slurm-job` on a real hung job of a real two-node Slurm cluster.

The cluster runs on this host (tests/slurm_cluster.py: two slurmd node names). The job is
the `rank_not_in_collective` scenario started by `sbatch` as 2 nodes x 2 tasks, so its
culprit, rank 2, runs on the second node. One command from outside the allocation must
name the cause, the culprit, its line and both nodes; a node whose collector fails is a
gap naming it while the other node's ranks are still read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import requires_torch, triage_cli
from triage.scenarios import CAUSE_IDS, SCENARIOS
from triage.scenarios.harness import free_port

if TYPE_CHECKING:
    from tests.slurm_cluster import SlurmCluster

pytest_plugins = ["tests.slurm_cluster"]
pytestmark = [pytest.mark.slurm, requires_torch]

SCENARIO = "rank_not_in_collective"  # rank 2 waits for a shard that never comes
CULPRIT = 2


def _batch_script(port: int) -> str:
    """Four tasks on two nodes form one gloo job; RANK is the task's SLURM_PROCID."""
    return f"""#!/bin/sh
export MASTER_ADDR=127.0.0.1 MASTER_PORT={port} WORLD_SIZE=4 OMP_NUM_THREADS=1
srun sh -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec {sys.executable} -u \
{SCENARIOS[SCENARIO]}'
"""


@pytest.fixture(scope="module")
def hung_job(slurm_cluster: SlurmCluster) -> Iterator[int]:
    """The job, once every rank has reached the step where rank 2 stalls; cancelled after."""
    job = slurm_cluster.sbatch(_batch_script(free_port()), nodes=2, ntasks_per_node=2)
    try:
        slurm_cluster.wait_running(job, timeout=60)
        output = slurm_cluster.job_output(job)

        def armed() -> bool | None:
            text = output.read_text() if output.exists() else ""
            return True if text.count("TRIAGE-SCENARIO: armed") == 4 else None

        slurm_cluster.wait_for(armed, 120, "every rank at the stalling step")
        yield job
    finally:
        slurm_cluster.cancel(job)


def _hang(cluster: SlurmCluster, job: int, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        triage_cli("hang", "--slurm-job", str(job), "--json"),
        env={**os.environ, **cluster.env, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_one_command_names_the_culprit_its_line_and_its_node(
    slurm_cluster: SlurmCluster, hung_job: int
) -> None:
    report = _report(_hang(slurm_cluster, hung_job))
    top = report["hypotheses"][0]
    assert top["cause_id"] == CAUSE_IDS[SCENARIO]
    assert top["ranks"] == [CULPRIT]
    assert top["location"]["file"].endswith(f"{SCENARIO}.py")
    assert (
        "time.sleep"
        in Path(top["location"]["file"]).read_text().splitlines()[top["location"]["line"] - 1]
    )
    groups = report["rank_groups"]
    assert sorted(r for g in groups for r in g["ranks"]) == [0, 1, 2, 3]
    culprit_group = next(g for g in groups if CULPRIT in g["ranks"])
    assert culprit_group["nodes"] == ["trnode-b"]
    assert {n for g in groups for n in g["nodes"]} == {"trnode-a", "trnode-b"}


def test_a_node_whose_collector_fails_is_a_gap_and_the_other_is_read(
    slurm_cluster: SlurmCluster, hung_job: int, tmp_path: Path
) -> None:
    collector = tmp_path / "collector.sh"
    collector.write_text(
        "#!/bin/sh\n"
        'if [ "$SLURMD_NODENAME" = trnode-b ]; then echo "disk full on trnode-b" >&2; exit 1; fi\n'
        f'exec {sys.executable} -m triage "$@"\n'
    )
    collector.chmod(0o755)
    report = _report(_hang(slurm_cluster, hung_job, TRIAGE_COLLECTOR=str(collector)))
    gaps = [f"{g['source']}: {g['reason']}" for g in report["gaps"]]
    node_gap = next(g for g in gaps if "trnode-b" in g and "not seen" in g)
    assert "disk full on trnode-b" in node_gap
    seen = sorted(r for g in report["rank_groups"] for r in g["ranks"])
    assert seen == [0, 1]
    assert any("ranks 2-3" in g and "not seen" in g for g in gaps), gaps
    assert "exited" not in json.dumps(report["rank_groups"])


def test_a_job_that_is_not_running_is_a_one_line_error(slurm_cluster: SlurmCluster) -> None:
    done = _hang(slurm_cluster, 999999)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "999999" in done.stderr
