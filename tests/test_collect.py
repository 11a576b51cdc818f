"""`triage collect` on each node, `triage hang --collections` over the nodes' documents.

A real hung gloo job on this host stands in for a job on two nodes: its ranks are split
between two collectors that call themselves nodeA and nodeB, as the collectors of two
nodes would see them, and the merged diagnosis must be the one `triage hang --pids` gives
on every rank. Selection by Slurm step runs on real processes with a Slurm task's
environment (the real Slurm cluster is for `--slurm-job` fan-out).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import requires_torch, triage_cli, wait_for_environ
from triage.collection.document import COLLECTION_SCHEMA, Collection, read_collections
from triage.observations import RankProcess, RankState
from triage.scenarios import CAUSE_IDS, CULPRITS, RankJob
from triage.text import format_nodes

SCENARIO = "rank_not_in_collective"  # rank 2 never reaches the all_reduce: on nodeB
RUN_ID = f"triage-collect-{uuid.uuid4().hex[:8]}"
SECRET = "hunter2-not-for-other-hosts"
SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


def triage(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        triage_cli(*args), input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


def report_of(*args: str, stdin: str | None = None) -> dict[str, Any]:
    done = triage("hang", "--json", *args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def collected(path: Path, *args: str) -> Collection:
    done = triage("collect", "--output", str(path), *args)
    assert done.returncode == 0, done.stderr
    return Collection.model_validate_json(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def job() -> Iterator[RankJob]:
    env = {"TORCHELASTIC_RUN_ID": RUN_ID, "TORCH_TEST_API_KEY": SECRET}
    with RankJob(SCENARIO, env=env) as hung:
        hung.wait_until_stalled()
        yield hung


@pytest.fixture(scope="module")
def nodes(job: RankJob, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nodeA.json and nodeB.json: ranks 0-1 and ranks 2-3, collected apart."""
    folder = tmp_path_factory.mktemp("collections")
    half = job.world_size // 2
    pids = [str(pid) for pid in job.pids]
    collected(folder / "nodeA.json", "--node-name", "nodeA", "--pids", *pids[:half])
    collected(folder / "nodeB.json", "--node-name", "nodeB", *pids[half:])
    return folder


def verdict(report: dict[str, Any]) -> tuple[str, list[int], tuple[str, int]]:
    top = report["hypotheses"][0]
    return top["cause_id"], sorted(top["ranks"]), (top["location"]["file"], top["location"]["line"])


@pytest.mark.scenario
@requires_torch
def test_two_nodes_give_the_verdict_of_every_pid_with_node_names(job: RankJob, nodes: Path) -> None:
    merged = report_of("--collections", str(nodes / "nodeA.json"), str(nodes / "nodeB.json"))
    direct = report_of("--pids", *map(str, job.pids))
    fault = (str(job.script), job.marker_line("fault"))
    assert (
        verdict(merged)
        == verdict(direct)
        == (CAUSE_IDS[SCENARIO], sorted(CULPRITS[SCENARIO]), fault)
    )
    half = job.world_size // 2
    grouped = {rank: group["nodes"] for group in merged["rank_groups"] for rank in group["ranks"]}
    assert sorted(grouped) == list(range(job.world_size))  # every rank is in a group
    for rank, names in grouped.items():
        assert ("nodeA" if rank < half else "nodeB") in names
    assert grouped[2] == ["nodeB"]  # the culprit's own group names its node only
    assert not [gap for gap in merged["gaps"] if "not seen" in gap["reason"]]
    assert report_of("--collections", str(nodes))["hypotheses"][0] == merged["hypotheses"][0]


@pytest.mark.scenario
@requires_torch
def test_a_bad_document_is_a_gap_and_the_others_are_analysed(nodes: Path, tmp_path: Path) -> None:
    corrupt = tmp_path / "nodeC.json"
    corrupt.write_text('{"format": "triage.collection", "node": ', encoding="utf-8")
    other = json.loads((nodes / "nodeB.json").read_text(encoding="utf-8"))
    other["schema_version"] = "0.9"
    old = tmp_path / "nodeD.json"
    old.write_text(json.dumps(other), encoding="utf-8")
    report = report_of("--collections", str(nodes / "nodeA.json"), str(corrupt), str(old))
    reasons = {gap["source"]: gap["reason"] for gap in report["gaps"]}
    assert reasons[str(corrupt)].startswith("not JSON")
    assert reasons[str(old)] == f"schema version 0.9, this triage reads {COLLECTION_SCHEMA}"
    assert "ranks 2-3 of WORLD_SIZE 4 are in no collection: not seen" in reasons["job"]
    assert "exited" not in json.dumps(report["rank_groups"])
    grouped = {rank for group in report["rank_groups"] for rank in group["ranks"]}
    assert grouped == {0, 1}  # nodeA's ranks are still analysed


@pytest.mark.scenario
@requires_torch
def test_documents_on_stdin_one_per_line_a_broken_line_lost_alone(nodes: Path) -> None:
    """`cat nodes/*.json | triage hang --collections -`, one node's line cut short."""
    first, second = ((nodes / f"node{n}.json").read_text(encoding="utf-8") for n in "AB")
    report = report_of("--collections", "-", stdin=first + second[:200] + "\n" + second)
    assert report["targets"]["collections"] == ["<stdin>"]
    assert {rank for group in report["rank_groups"] for rank in group["ranks"]} == {0, 1, 2, 3}
    assert [(g["source"], g["reason"]) for g in report["gaps"] if "JSON" in g["reason"]] == [
        ("<stdin>:2", "not JSON")
    ]
    documents, gaps = read_collections([str(nodes)])
    assert [doc.node for _, doc in documents] == ["nodeA", "nodeB"] and not gaps


@pytest.mark.scenario
@requires_torch
def test_the_document_is_one_versioned_line_of_the_model(job: RankJob, nodes: Path) -> None:
    text = (nodes / "nodeA.json").read_text(encoding="utf-8")
    assert text.count("\n") == 1 and text.endswith("\n")  # one line per node for a fan-out
    raw = json.loads(text)
    assert (raw["format"], raw["schema_version"]) == ("triage.collection", COLLECTION_SCHEMA)
    doc = Collection.model_validate(raw)
    assert (doc.node, doc.ranks, doc.selection.pids) == ("nodeA", [0, 1], job.pids[:2])
    kinds = {(item.kind, item.rank) for item in doc.evidence}
    for rank in (0, 1):
        assert {(RankState.EVIDENCE_KIND, rank), (RankProcess.EVIDENCE_KIND, rank)} <= kinds
        assert ("environment", rank) in kinds
    assert any(item.kind == "environment" and item.rank is None for item in doc.evidence)
    assert SECRET not in text and "TORCH_TEST_API_KEY" in text  # named, its value redacted


@pytest.mark.scenario
@requires_torch
def test_run_id_and_master_pick_exactly_the_jobs_ranks(job: RankJob, tmp_path: Path) -> None:
    other_job = {
        "RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "TORCHELASTIC_RUN_ID": "other",
    }
    no_rank = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(job.port),
        "TORCHELASTIC_RUN_ID": RUN_ID,
    }
    with sleepers([other_job, no_rank]):
        for args in (["--run-id", RUN_ID], ["--master", f"127.0.0.1:{job.port}"]):
            doc = collected(tmp_path / "doc.json", *args)
            pids = sorted(
                e.data["pid"] for e in doc.evidence if e.kind == RankProcess.EVIDENCE_KIND
            )
            assert (pids, doc.ranks) == (sorted(job.pids), list(range(job.world_size))), args


def test_slurm_selection_keeps_its_steps_tasks_on_its_node(tmp_path: Path) -> None:
    job = "990" + uuid.uuid4().hex[:5].translate(str.maketrans("abcdef", "123456"))
    task = {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0"}
    envs = [
        task | {"SLURM_PROCID": "0", "SLURMD_NODENAME": "trnode-a"},
        task | {"SLURM_PROCID": "1", "SLURMD_NODENAME": "trnode-b"},
        {"SLURM_JOB_ID": job, "SLURM_PROCID": "0", "SLURMD_NODENAME": "trnode-a"},  # batch
        task | {"SLURM_STEP_ID": "1", "SLURM_PROCID": "0", "SLURMD_NODENAME": "trnode-a"},
        task | {"SLURM_JOB_ID": job + "1", "SLURM_PROCID": "0", "SLURMD_NODENAME": "trnode-a"},
    ]
    with sleepers(envs) as procs:
        on_a = collected(tmp_path / "a.json", "--slurm-job", f"{job}.0", "--node-name", "trnode-a")
        assert on_a.selection.slurm_job == f"{job}.0" and on_a.node == "trnode-a"
        assert [e.data["pid"] for e in on_a.evidence if e.kind == "process"] == [procs[0].pid]
        every_step = collected(tmp_path / "all.json", "--slurm-job", job)
        found = sorted(e.data["pid"] for e in every_step.evidence if e.kind == "process")
        assert found == sorted(p.pid for p in (procs[0], procs[1], procs[3]))


def test_a_pid_that_does_not_exist_is_one_line_and_exit_1() -> None:
    done = triage("collect", "--pids", str(2**22 + 4321))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("triage: error: nothing collected on ")
    assert "does not exist" in done.stderr
    assert Collection.model_validate_json(done.stdout).gaps  # the document still says why


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give the job's ranks"),
        (["--run-id", "x", "--master", "a:1"], "choose one way"),
        (["--slurm-job", "12.batch"], "JOBID or JOBID.STEP"),
        (["--master", "nohost"], "ADDR:PORT"),
        (["--pids", "12x"], "process ids"),
    ],
)
def test_usage_errors_exit_2_in_one_line(args: list[str], says: str) -> None:
    done = triage("collect", *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr


def test_hang_takes_collections_instead_of_pids() -> None:
    done = triage("hang", "--pids", "1", "--collections", "x.json")
    assert done.returncode == 2 and "replaces --pids" in done.stderr


def test_node_names_compress_like_slurm_host_lists() -> None:
    assert format_nodes([f"node{n:03d}" for n in range(1, 513)]) == "node[001-512]"
    assert format_nodes(["nodeB", "nodeA"]) == "nodeA,nodeB"
    assert format_nodes(["gpu9", "gpu10", "gpu12", "login"]) == "gpu[9-10,12],login"
    assert format_nodes(["n009", "n10"]) == "n[009,10]"


@contextmanager
def sleepers(envs: list[dict[str, str]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Python processes with these environments (and nothing of this one's job variables)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for env in envs:
            base = {"PATH": "/usr/bin:/bin"}
            procs.append(subprocess.Popen([sys.executable, "-c", SLEEPER], env=base | env))
        wait_for_environ(p.pid for p in procs)
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
