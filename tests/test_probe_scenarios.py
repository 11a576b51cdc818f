"""Real jobs with triage.probe: each planted fault is visible in the raw snapshot data.

Every check runs twice: on the recorded fixtures (tests/fixtures/probe, fast, no torch) and,
marked `scenario`, on a fresh run of the same job (2-3 gloo ranks on CPU, each rank a
process the harness kills whatever happens). The hung job is asked for its snapshots
with the signal, through the same code as `triage hang --signal-probe`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, requires_torch, triage_cli
from tests.test_runner import env, read_report, torchrun, triage_run
from triage.observations import ProbeRequest, ProbeSnapshot
from triage.scenarios import RankJob, pid_alive
from triage.scenarios.wrong import PROBE_DIR, WRONG_JOBS, run_wrong

FIXTURES = REPO / "tests" / "fixtures" / "probe"
HUNG = "hung_collective"
FINISHING = [name for name in WRONG_JOBS if name != HUNG]

Snapshots = dict[tuple[int, str | None], ProbeSnapshot]
__all__ = ["env"]  # the fixture: a token in every job's environment, killed at teardown


def snapshots(probe_dir: Path) -> Snapshots:
    """(rank, tag) -> snapshot; every file must validate against the contract."""
    found: Snapshots = {}
    for path in sorted(probe_dir.glob("triage-probe-*.json")):
        snap = ProbeSnapshot.model_validate_json(path.read_text())
        assert snap.rank is not None
        assert path.name.startswith(f"triage-probe-rank{snap.rank}-call{snap.call:04d}-")
        found[(snap.rank, snap.tag)] = snap
    assert found, f"no snapshots in {probe_dir}"
    return found


def replicas(probe_dir: Path) -> dict[int, dict[str, Any]]:
    """step -> check_replicas result, as the job wrote them."""
    out = {}
    for path in sorted(probe_dir.glob("triage-replicas-*.json")):
        data = json.loads(path.read_text())
        out[data["step"]] = data
    return out


def stats(snaps: Snapshots, tag: str, name: str, what: str = "value") -> dict[int, Any]:
    """rank -> the value or grad stats of one tensor at one tag (None: not there)."""
    out = {}
    for (rank, tagged), snap in snaps.items():
        if tagged == tag:
            [record] = [t for t in snap.tensors if t.name == name]
            out[rank] = getattr(record, what)
    return out


def checksums(snaps: Snapshots, tag: str, name: str, what: str = "value") -> set[str]:
    return {s.checksum for s in stats(snaps, tag, name, what).values() if s is not None}


def diverging(check: dict[str, Any], what: str) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in check["diverging"] if d["what"] == what}


def logs(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("logs/*.log")))


# -- what each planted fault looks like ------------------------------------------------------


def unsynced_grads(folder: Path) -> None:
    snaps, checks = snapshots(folder / PROBE_DIR), replicas(folder / PROBE_DIR)
    params = ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name in params:
        assert len(checksums(snaps, "init", name)) == 1  # broadcast: equal at the start
        assert len(checksums(snaps, "step 0", name, "grad")) == 2  # never averaged
        assert len(checksums(snaps, "step 0", name)) == 2
    assert checks[0]["diverging"] == []
    for step in (1, 3):
        for what in ("value", "grad"):
            found = diverging(checks[step], what)
            assert sorted(found) == sorted(params)
            assert {d["since_step"] for d in found.values()} == {1}
            assert all(d["max_relative_diff"] > 0 for d in found.values())


def unused_head(folder: Path) -> None:
    snaps = snapshots(folder / PROBE_DIR)
    tag = "step 0 after backward"
    assert {s.wrappers[0] for s in snaps.values()} == {"DistributedDataParallel"}
    for name in ("aux_head.weight", "aux_head.bias"):
        assert stats(snaps, tag, name, "grad") == {0: None, 1: None}
    for name in ("head.weight", "body.0.weight"):
        assert None not in stats(snaps, tag, name, "grad").values()
    # the bucket never completed: not even the used parameters were all-reduced
    assert len(checksums(snaps, tag, "body.0.weight", "grad")) == 2
    assert "Expected to have finished reduction in the prior iteration" in logs(folder)


def tp_wrong_placement(folder: Path) -> None:
    snaps, checks = snapshots(folder / PROBE_DIR), replicas(folder / PROBE_DIR)
    for tag in ("init", "step 0"):
        for rank in (0, 1):
            snap = snaps[(rank, tag)]
            assert [m.model_dump() for m in snap.meshes] == [
                {"device_type": "cpu", "shape": [2], "dim_names": ["tp"], "ranks": [0, 1]}
            ]
            placements = {t.name: t.placements for t in snap.tensors}
            assert placements["up.weight"] == ["Shard(dim=0)"]
            assert placements["down.weight"] == ["Shard(dim=1)"]
            assert placements["down.bias"] == ["Replicate()"]
    loaded = {rank: snaps[(rank, "after checkpoint load")] for rank in (0, 1)}
    up = {rank: next(t for t in s.tensors if t.name == "up.weight") for rank, s in loaded.items()}
    assert (up[0].placements, up[0].local_shape) == (None, None)  # rank 0: a plain tensor
    assert (up[1].placements, up[1].local_shape) == (["Shard(dim=0)"], [8, 8])
    assert diverging(checks[0], "placements") == {}
    late = diverging(checks[1], "placements")
    assert "up.weight" in late and late["up.weight"]["since_step"] == 1
    assert "rank 0: a plain tensor" in late["up.weight"]["detail"]
    for rank in (0, 1):  # CommDebugMode: RowwiseParallel's all_reduce, in `down`'s forward
        summary = json.loads((folder / PROBE_DIR / f"comm-summary-rank{rank}.json").read_text())
        assert (summary["total"], summary["per_op"]) == (1, {"all_reduce": 1})
        assert summary["per_module"]["MLP.down"]["forward"] == {"all_reduce": 1}
        assert "MLP.up" not in summary["per_module"]  # Colwise needs none forward
    assert "got mixed torch.Tensor and DTensor" in logs(folder)


def init_mismatch(folder: Path) -> None:
    snaps, checks = snapshots(folder / PROBE_DIR), replicas(folder / PROBE_DIR)
    params = ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name in params:
        assert len(checksums(snaps, "init", name)) == 3  # different from the start
        assert len(checksums(snaps, "step 0", name, "grad")) == 1  # averaged correctly
        assert len(checksums(snaps, "step 1", name)) == 3
    for step in (0, 2):
        found = diverging(checks[step], "value")
        assert sorted(found) == sorted(params)
        assert all(d["since_step"] == 0 and d["ranks"] == [0, 1, 2] for d in found.values())
        assert diverging(checks[step], "grad") == {}


def nan_one_rank(folder: Path) -> None:
    snaps = snapshots(folder / PROBE_DIR)

    def nonfinite(tag: str, what: str) -> dict[int, int]:
        return {r: s.nonfinite for r, s in stats(snaps, tag, "0.weight", what).items()}

    assert nonfinite("step 0", "value") == {0: 0, 1: 0}
    local = nonfinite("step 1 micro-batch 0", "grad")
    assert local[0] == 0 and local[1] > 0  # still local: only the rank with the bad sample
    assert all(n > 0 for n in nonfinite("step 1 micro-batch 1", "grad").values())  # averaged
    assert all(n > 0 for n in nonfinite("step 1", "value").values())  # and stepped


def batchnorm_unsynced(folder: Path) -> None:
    snaps, checks = snapshots(folder / PROBE_DIR), replicas(folder / PROBE_DIR)
    for name in ("0.weight", "1.weight", "3.weight"):
        assert len(checksums(snaps, "step 2", name)) == 1  # DDP keeps parameters in sync
    for name in ("1.running_mean", "1.running_var"):
        assert len(checksums(snaps, "init", name)) == 1
        assert len(checksums(snaps, "step 2", name)) == 2
    assert checks[0]["diverging"] == []
    found = diverging(checks[3], "value")
    assert sorted(found) == ["1.running_mean", "1.running_var"]
    assert {d["kind"] for d in found.values()} == {"buffer"}


CHECKS: dict[str, Callable[[Path], None]] = {
    f.__name__: f
    for f in (
        unsynced_grads,
        unused_head,
        tp_wrong_placement,
        init_mismatch,
        nan_one_rank,
        batchnorm_unsynced,
    )
}


def hung_signal_snapshots(probe_dir: Path, fault_line: int, wait_line: int) -> None:
    snaps = snapshots(probe_dir)
    assert sorted(snaps) == [(0, None), (1, None)]
    where = {0: ("all_reduce", fault_line), 1: ("barrier", wait_line)}
    for (rank, _), snap in snaps.items():
        assert snap.reason == "signal" and snap.model == "Sequential"
        assert all(t.value is not None for t in snap.tensors)  # CPU tensors are read
        main = next(s for s in snap.stacks if s.thread == "MainThread")
        user = next(f for f in main.frames if f.file.endswith(f"{HUNG}.py"))
        assert (main.frames[0].function, user.line) == where[rank]
        assert any(s.thread == "triage-probe" for s in snap.stacks)


def test_every_scenario_has_its_check() -> None:
    assert sorted(CHECKS) == sorted(FINISHING)


@pytest.mark.parametrize("name", FINISHING)
def test_recorded_snapshots_show_the_fault(name: str) -> None:
    CHECKS[name](FIXTURES / name)


def test_recorded_signal_snapshots_show_where_each_rank_waits() -> None:
    expected = json.loads((FIXTURES / HUNG / "expected.json").read_text())
    assert expected["signal"]["sent"] == expected["pids"]
    job = RankJob(WRONG_JOBS[HUNG].script)
    hung_signal_snapshots(
        FIXTURES / HUNG / PROBE_DIR, job.marker_line("fault"), job.marker_line("wait")
    )


@pytest.mark.scenario
@requires_torch
@pytest.mark.parametrize("name", FINISHING)
def test_real_job_shows_the_fault(name: str, tmp_path: Path) -> None:
    run = run_wrong(name, tmp_path)
    assert not [pid for pid in run.pids if pid_alive(pid)]
    CHECKS[name](tmp_path)


@pytest.mark.scenario
@requires_torch
def test_a_hung_job_answers_the_signal_and_stays_hung(tmp_path: Path) -> None:
    job = RankJob(WRONG_JOBS[HUNG].script, 2, log_dir=tmp_path / "logs")
    job.extra_env["TRIAGE_DUMP_DIR"] = str(tmp_path / PROBE_DIR)
    with job:
        job.wait_until_stalled(timeout_s=120)
        plain = subprocess.run(
            [*triage_cli("hang", "--json", *map(str, job.pids))],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert not list((tmp_path / PROBE_DIR).glob("*.json"))  # no flag, no signal
        done = subprocess.run(
            [*triage_cli("hang", "--json", "--signal-probe", *map(str, job.pids))],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert job.live_ranks() == [0, 1]  # still there, still hung
        stalled = job.wait_until_stalled(timeout_s=60)
        assert sorted(stalled) == [0, 1]
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert not any("signal-probe" in n for n in json.loads(plain.stdout)["notes"])
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["notes"][0].startswith("--signal-probe: sent triage.probe's signal to 2 ranks")
    [asked] = [e for e in report["evidence"] if e["kind"] == ProbeRequest.EVIDENCE_KIND]
    files = asked["data"]["snapshot_files"]
    assert sorted(Path(f).parent for f in files) == [tmp_path / PROBE_DIR] * 2
    hung_signal_snapshots(tmp_path / PROBE_DIR, job.marker_line("fault"), job.marker_line("wait"))
    assert report["hypotheses"][0]["cause_id"] == "hang.mismatched_collective"


@pytest.mark.scenario
@requires_torch
def test_triage_run_collects_the_snapshots_of_a_hung_job(
    env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    script = WRONG_JOBS[HUNG].script
    done = triage_run(
        env, "--out", str(out), "--hang-after", "3", "--kill-on-hang", "--", *torchrun(script)
    )
    assert done.returncode == 3, done.stderr[-3000:]
    report = read_report(out)
    files = report["targets"]["snapshot_files"]
    assert sorted(Path(f).parent for f in files) == [out / "probe"] * 2
    assert any(
        "an in-process snapshot with triage.probe's signal (2 snapshots)" in n
        for n in report["notes"]
    )
    job = RankJob(script)
    hung_signal_snapshots(out / "probe", job.marker_line("fault"), job.marker_line("wait"))
    for path in files:  # one Flight Recorder dump per rank and signal: the runner's own
        named = json.loads(Path(path).read_text())["flight_recorder"]
        assert (Path(path).parent / named).resolve().parent == out / "fr"
    assert not [pid for pid in report["targets"]["pids"] if pid_alive(pid)]
