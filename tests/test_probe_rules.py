"""Probe snapshots through the real engine: read_probe_snapshots compares the ranks, and the
snapshot rules name the cause, the tensors, the culprit ranks and the user line.

Snapshots are built here with the contract's own models (ProbeSnapshot) and written as
JSON, one file per rank and call, named as triage.probe names them.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import analyze_files, hypothesis
from triage.models import Report
from triage.observations import (
    Frame,
    MeshRecord,
    ProbeSnapshot,
    ReplicaCheck,
    TensorRecord,
    TensorStats,
    ThreadStack,
)
from triage.registry import REGISTRY

TRAIN = "/job/train.py"
DDP = ["DistributedDataParallel"]


def stats(content: object, nonfinite: int = 0, norm: float = 1.0) -> TensorStats:
    """Stats of a tensor whose bytes are `content`: equal content, equal checksum."""
    digest = hashlib.blake2b(repr(content).encode(), digest_size=16).hexdigest()
    return TensorStats(checksum=digest, sum=norm, norm=norm, nonfinite=nonfinite)


def param(
    name: str,
    value: object,
    grad: object | None = None,
    *,
    kind: str = "parameter",
    shape: list[int] | None = None,
    **fields: Any,
) -> TensorRecord:
    """A tensor record; `value`/`grad` stand for the content (None: no .grad)."""
    norm = float(value) if isinstance(value, (int, float)) else 1.0
    return TensorRecord(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        shape=shape or [4, 4],
        dtype="torch.float32",
        device="cpu",
        requires_grad=kind == "parameter",
        value=value if isinstance(value, TensorStats) else stats(value, norm=norm),
        grad=None if grad is None else grad if isinstance(grad, TensorStats) else stats(grad),
        **fields,
    )


def write(
    folder: Path,
    rank: int,
    call: int,
    tensors: list[TensorRecord],
    *,
    world: int = 4,
    wrappers: list[str] | None = None,
    meshes: list[MeshRecord] | None = None,
    tag: str | None = None,
    pid: int | None = None,
    line: int = 42,
    optimizer: dict[str, Any] | None = None,
) -> Path:
    """One rank's snapshot at one call, as the probe writes it."""
    pid = pid if pid is not None else 1000 + rank
    snapshot = ProbeSnapshot(
        rank=rank,
        world_size=world,
        backend="gloo",
        host="node0",
        pid=pid,
        time=1_700_000_000.0 + call + pid / 1e6,
        call=call,
        tag=tag if tag is not None else f"step {call}",
        model="Net",
        wrappers=wrappers or [],
        meshes=meshes or [],
        tensors=tensors,
        optimizer=optimizer,
        stacks=[
            ThreadStack(
                thread="MainThread",
                thread_id=1,
                frames=[  # innermost first; the probe leaves its own frames out
                    Frame(function="step", file="/venv/lib/torch/optim/sgd.py", line=80),
                    Frame(function="train", file=TRAIN, line=line),
                    Frame(function="<module>", file=TRAIN, line=90),
                ],
            )
        ],
    )
    path = folder / f"triage-probe-rank{rank}-call{call:04d}-pid{pid}.json"
    path.write_text(snapshot.model_dump_json(indent=1))
    return path


def analyze(folder: Path, symptom: str | None = None) -> Report:
    return analyze_files(folder, {}, symptom=symptom)


def causes(report: Report) -> list[str]:
    return [h.cause_id for h in report.hypotheses]


def checks(folder: Path) -> list[ReplicaCheck]:
    run = REGISTRY.run("read_probe_snapshots", {"snapshot_files": [str(folder)]})
    return [ReplicaCheck.model_validate(e.data) for e in run.evidence if e.kind == "replica_check"]


# --- wrong.unsynced_grads ----------------------------------------------------------------


def test_unreduced_gradients_are_unsynced_grads_with_names_ranks_and_line(tmp_path: Path) -> None:
    for rank in range(4):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0), param("fc.bias", 2.0)])
        write(
            tmp_path,
            rank,
            1,
            [
                param("fc.weight", 1.0 + rank, grad=rank),
                param("fc.bias", 2.0 + rank, grad=rank),
                param("bn.running_mean", rank, kind="buffer", shape=[4]),
            ],
        )
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert top.cause_id == "wrong.unsynced_grads", causes(report)
    assert hypothesis(report, "wrong.batchnorm_sync").confidence < 0.5  # a consequence
    assert top.ranks == [0, 1, 2, 3]
    assert "fc.weight" in top.title and "fc.bias" in top.summary
    assert "identical at step 0" in top.summary and "No DDP/FSDP wrapper" in top.summary
    assert "no majority" in top.summary
    assert top.location is not None and (top.location.file, top.location.line) == (TRAIN, 42)
    assert top.confidence >= 0.9
    assert "wrong.init_mismatch" not in causes(report)
    assert report.playbook == "wrong-results"


def test_one_replica_drifting_is_named_by_majority_vote(tmp_path: Path) -> None:
    """Gradients zeroed (set_to_none) before the snapshot: the drift alone shows it."""
    for rank in range(4):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0)], wrappers=DDP)
        write(tmp_path, rank, 1, [param("fc.weight", 5.0 if rank == 3 else 1.0)], wrappers=DDP)
    top = analyze(tmp_path).hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.unsynced_grads", [3])
    assert "rank 3, against ranks 0-2, which agree" in top.summary
    assert 0.75 <= top.confidence < 0.9


def test_ddp_gradients_that_differ_name_the_bypassed_wrapper(tmp_path: Path) -> None:
    for rank in range(2):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0, grad=rank)], wrappers=DDP, world=2)
    top = analyze(tmp_path).hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.unsynced_grads", [0, 1])
    assert "model.module" in top.summary


# --- wrong.init_mismatch -----------------------------------------------------------------


def test_weights_different_from_the_first_snapshot_are_init_mismatch(tmp_path: Path) -> None:
    for rank in range(4):
        weight = 7.0 if rank == 2 else 1.0
        write(tmp_path, rank, 0, [param("fc.weight", weight), param("fc.bias", 0.5)])
        grad = 0.25  # reduced: identical on every rank
        write(
            tmp_path, rank, 1, [param("fc.weight", weight + 1, grad), param("fc.bias", 0.4, grad)]
        )
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.init_mismatch", [2]), causes(report)
    assert "fc.weight" in top.summary and "step 0" in top.summary
    assert "still differ at step 1" in top.summary and "seed or a broadcast" in top.summary
    assert top.confidence >= 0.8
    assert "wrong.unsynced_grads" not in causes(report)


def adam(state_tensors: int) -> dict[str, Any]:
    """The probe's optimizer record: Adam creates its state at the first step."""
    groups = [{"params": 2, "lr": 0.001, "betas": [0.9, 0.999]}]
    return {"class": "Adam", "param_groups": groups, "state_tensors": state_tensors}


def test_before_the_first_step_different_weights_are_init_mismatch_for_sure(
    tmp_path: Path,
) -> None:
    for rank in range(2):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0 + rank)], world=2, optimizer=adam(0))
    top = analyze(tmp_path).hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.init_mismatch", [0, 1])
    assert "no step has run" in top.summary and top.confidence >= 0.9


def test_after_steps_different_weights_are_only_likely_init_mismatch(tmp_path: Path) -> None:
    for rank in range(2):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0 + rank)], world=2, optimizer=adam(2))
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert top.cause_id == "wrong.init_mismatch" and top.confidence <= 0.6
    assert "already stepped" in top.summary
    rival = hypothesis(report, "wrong.unsynced_grads")  # unreduced steps fit as well
    assert rival.confidence < top.confidence
    assert any(
        "close calls" in step and "before the first step" in step for step in report.next_steps
    )


# --- wrong.unused_parameters -------------------------------------------------------------


def test_parameters_without_grad_on_some_ranks_are_unused_parameters(tmp_path: Path) -> None:
    for rank in range(4):
        unused = rank == 1
        write(
            tmp_path,
            rank,
            0,
            [
                param("body.weight", 1.0, grad=0.5),
                param("head.weight", 2.0, grad=None if unused else 0.5),
                param("head.bias", 3.0, grad=None if unused else 0.5),
            ],
            wrappers=DDP,
        )
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.unused_parameters", [1]), causes(report)
    assert "head.weight" in top.title and "head.bias" in top.title
    assert "find_unused_parameters" in top.summary and "modules head" in top.summary
    assert top.confidence >= 0.8


def test_snapshot_after_zero_grad_is_not_unused_parameters(tmp_path: Path) -> None:
    for rank in range(2):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0), param("fc.bias", 2.0)], world=2)
    report = analyze(tmp_path, symptom="wrong")
    assert causes(report) == ["wrong.unknown"]


# --- wrong.nan ---------------------------------------------------------------------------


def test_nan_on_one_rank_is_wrong_nan_not_unsynced_grads(tmp_path: Path) -> None:
    for rank in range(4):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0, grad=0.5)], wrappers=DDP)
        bad = rank == 3
        grad = stats("nan", nonfinite=16) if bad else 0.5
        value = stats("nan-w", nonfinite=16) if bad else 1.5
        write(tmp_path, rank, 1, [param("fc.weight", value, grad=grad)], wrappers=DDP)
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.nan", [3]), causes(report)
    assert "gradients of fc.weight" in top.summary and "step 0 were clean" in top.summary
    assert "wrong.unsynced_grads" not in causes(report)


# --- wrong.batchnorm_sync ----------------------------------------------------------------


def test_batchnorm_statistics_that_differ_while_weights_agree(tmp_path: Path) -> None:
    for rank in range(4):
        write(
            tmp_path,
            rank,
            0,
            [
                param("conv.weight", 1.0, grad=0.1),
                param("bn.weight", 1.0, grad=0.1),
                param("bn.running_mean", 0.1 * rank, kind="buffer", shape=[4]),
                param("bn.running_var", 1 + rank, kind="buffer", shape=[4]),
                param("bn.num_batches_tracked", 1, kind="buffer", shape=[]),
            ],
            wrappers=DDP,
        )
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.batchnorm_sync", [0, 1, 2, 3]), causes(report)
    assert "bn.running_mean" in top.summary and "bn.running_var" in top.summary
    assert "bn.num_batches_tracked" not in top.summary
    assert "parameters agree" in top.summary and "SyncBatchNorm" in top.fix
    assert "broadcast_buffers" in top.fix


# --- DTensors: wrong.placement, replica groups -------------------------------------------

MESH_2x2 = MeshRecord(device_type="cpu", shape=[2, 2], dim_names=["dp", "tp"], ranks=[0, 1, 2, 3])


def dtensor(name: str, value: object, placements: list[str], **fields: Any) -> TensorRecord:
    return param(name, value, placements=placements, mesh=0, **fields)


def test_shards_are_never_compared_only_replicas_across_replicate_dims(tmp_path: Path) -> None:
    """Mesh (dp=2, tp=2), [Replicate(), Shard(0)]: ranks 0,2 hold shard 0 and ranks 1,3 shard
    1. Different shards are expected; replicas of one shard must match."""
    for rank in range(4):
        shard = rank % 2  # tp coordinate
        tensors = [
            dtensor("w", f"shard{shard}", ["Replicate()", "Shard(dim=0)"], local_shape=[2, 4])
        ]
        write(tmp_path, rank, 0, tensors, meshes=[MESH_2x2])
    (check,) = checks(tmp_path)
    assert check.compared == 1 and check.diverging == []
    assert "wrong.placement" not in causes(analyze(tmp_path))


def test_a_replica_of_a_shard_that_differs_is_named(tmp_path: Path) -> None:
    for rank in range(4):
        shard = rank % 2
        content = "odd" if rank == 3 else f"shard{shard}"
        tensors = [dtensor("w", content, ["Replicate()", "Shard(dim=0)"], local_shape=[2, 4])]
        write(tmp_path, rank, 0, tensors, meshes=[MESH_2x2])
    (check,) = checks(tmp_path)
    (divergence,) = check.diverging
    assert divergence.what == "value" and divergence.dtensor
    assert divergence.ranks == [1, 3] and divergence.majority is False  # a pair: no majority
    top = analyze(tmp_path).hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.placement", [1, 3])
    assert "Replicate" in top.summary


def test_replicas_on_a_replicate_dim_that_drift_apart_are_unsynced(tmp_path: Path) -> None:
    """HSDP-like (dp=2, tp=2): ranks 1 and 3 hold the same shard; identical at step 0, not at
    step 1, so the replicate dim lost its gradient reduction."""
    for call in range(2):
        for rank in range(4):
            content = f"shard{rank % 2}" + ("-drift" if call == 1 and rank == 3 else "")
            tensors = [dtensor("w", content, ["Replicate()", "Shard(dim=0)"], local_shape=[2, 4])]
            write(tmp_path, rank, call, tensors, meshes=[MESH_2x2])
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.unsynced_grads", [1, 3]), causes(report)
    assert "wrong.placement" not in causes(report)


def test_partial_parameters_are_a_weak_placement_hint(tmp_path: Path) -> None:
    mesh = MeshRecord(device_type="cpu", shape=[2], ranks=[0, 1])
    for rank in range(2):
        write(tmp_path, rank, 0, [dtensor("w", rank, ["Partial(sum)"])], world=2, meshes=[mesh])
    (check,) = checks(tmp_path)
    assert check.partial == ["w"] and check.diverging == []  # summands are not compared
    top = analyze(tmp_path).hypotheses[0]
    assert top.cause_id == "wrong.placement" and top.confidence <= 0.5
    assert "Partial" in top.summary


def test_placements_that_differ_across_ranks(tmp_path: Path) -> None:
    mesh = MeshRecord(device_type="cpu", shape=[4], ranks=[0, 1, 2, 3])
    for rank in range(4):
        placement, local = ("Shard(dim=1)", [4, 1]) if rank == 2 else ("Shard(dim=0)", [1, 4])
        tensors = [dtensor("attn.wq.weight", rank, [placement], local_shape=local)]
        write(tmp_path, rank, 0, tensors, meshes=[mesh])
    report = analyze(tmp_path)
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.placement", [2]), causes(report)
    assert "attn.wq.weight" in top.title and "Shard(dim=1)" in top.summary
    assert top.confidence >= 0.85


@pytest.mark.parametrize(
    ("placements", "local", "says"),
    [
        (["Shard(dim=0)"], [4, 4], "local shape [4, 4] does not fit"),
        (["Shard(dim=2)"], [4, 4], "no such dim"),
        (["Shard(dim=0)", "Replicate()"], [1, 4], "one placement per mesh dim"),
    ],
)
def test_placements_that_do_not_fit_the_mesh(
    tmp_path: Path, placements: list[str], local: list[int], says: str
) -> None:
    mesh = MeshRecord(device_type="cpu", shape=[4], ranks=[0, 1, 2, 3])
    for rank in range(4):
        write(tmp_path, rank, 0, [dtensor("w", rank, placements, local_shape=local)], meshes=[mesh])
    top = analyze(tmp_path).hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.placement", [0, 1, 2, 3])
    assert says in top.summary


def test_uneven_shards_follow_torch_chunk(tmp_path: Path) -> None:
    """A dim of 10 over 4 ranks splits 3,3,3,1: not a misfit."""
    mesh = MeshRecord(device_type="cpu", shape=[4], ranks=[0, 1, 2, 3])
    for rank, rows in enumerate([3, 3, 3, 1]):
        tensors = [dtensor("w", rank, ["Shard(dim=0)"], shape=[10, 4], local_shape=[rows, 4])]
        write(tmp_path, rank, 0, tensors, meshes=[mesh])
    assert checks(tmp_path)[0].diverging == []


# --- config.world_size_mismatch ----------------------------------------------------------


def test_a_mesh_smaller_than_the_world_leaves_ranks_outside(tmp_path: Path) -> None:
    mesh = MeshRecord(device_type="cpu", shape=[2], dim_names=["tp"], ranks=[0, 1])
    for rank in range(4):
        local = [2, 4] if rank < 2 else [0, 4]
        tensors = [dtensor("fc.weight", rank, ["Shard(dim=0)"], local_shape=local)]
        write(tmp_path, rank, 0, tensors, meshes=[mesh])
    report = analyze(tmp_path)
    found = hypothesis(report, "config.world_size_mismatch")
    assert found.ranks == [2, 3] and found is report.hypotheses[0], causes(report)
    assert "mesh [2] (tp)" in found.summary and "a world of 4" in found.summary


def test_a_mesh_bigger_than_the_world(tmp_path: Path) -> None:
    mesh = MeshRecord(device_type="cpu", shape=[2, 4], ranks=list(range(8)))
    for rank in range(4):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0)], meshes=[mesh])
    top = analyze(tmp_path).hypotheses[0]
    assert top.cause_id == "config.world_size_mismatch" and top.confidence >= 0.85
    assert "holds 8 ranks but the world has 4" in top.summary


# --- reading: files, grouping, scale -----------------------------------------------------


def test_an_invalid_snapshot_is_a_gap_naming_the_file(tmp_path: Path) -> None:
    for rank in range(2):
        write(tmp_path, rank, 0, [param("fc.weight", 1.0 + rank)], world=2)
    broken = tmp_path / "triage-probe-rank2-call0000-pid9.json"
    broken.write_text('{"format": "triage.probe/1", "rank": 2, "tensors": [{"name": 3}]}')
    cut = tmp_path / "triage-probe-rank3-call0000-pid8.json"
    cut.write_text(write(tmp_path / "..", 3, 0, [param("w", 1.0)]).read_text()[:300])
    report = analyze(tmp_path)
    sources = {g.source: g.reason for g in report.gaps if g.tool == "read_probe_snapshots"}
    assert "not a valid triage.probe/1 snapshot" in sources[str(broken)]
    assert "not a valid triage.probe/1 snapshot" in sources[str(cut)]
    assert report.hypotheses[0].cause_id == "wrong.init_mismatch"  # the valid ones still count
    assert [r.tool for r in report.tool_runs] == ["collect_files", "read_probe_snapshots"]


def test_hostile_values_cost_bounded_work_and_never_raise(tmp_path: Path) -> None:
    pair = MeshRecord(device_type="cpu", shape=[2], ranks=[0, 1])
    empty = MeshRecord(device_type="cpu", shape=[0], ranks=[])
    for rank in range(2):
        tensors = [
            dtensor("a", rank, ["Bogus()"]),
            param("b", rank, placements=["Shard(dim=0)"], mesh=7),
            param("c", rank, placements=["Shard(dim=0)"], mesh=1, local_shape=[9, 9, 9]),
        ]
        write(tmp_path, rank, 0, tensors, world=10**12, meshes=[pair, empty])
    run = REGISTRY.run("read_probe_snapshots", {"snapshot_files": [str(tmp_path)]})
    assert run.result.status.value == "ok", run.result.error
    (check,) = [
        ReplicaCheck.model_validate(e.data) for e in run.evidence if e.kind == "replica_check"
    ]
    assert len(check.missing) == 512
    details = {d.name: d.detail for d in check.diverging}
    assert "unknown placement 'Bogus()'" in details["a"]
    assert "without a mesh" in details["b"]


def test_snapshots_are_routed_to_their_reader_not_to_logs_or_memory(tmp_path: Path) -> None:
    for rank in range(2):
        path = write(tmp_path, rank, 0, [param("fc.weight", 1.0)], world=2)
        data = json.loads(path.read_text())  # memory counters a memory reader would take
        data["cuda_memory"] = {"allocated_bytes.all.current": 1 << 30}
        path.write_text(json.dumps(data))
    (tmp_path / "config.json").write_text(json.dumps({"lr": 0.1}))
    (tmp_path / "rank0.log").write_text("step 1 loss 0.5\n")
    run = REGISTRY.run("collect_files", {"paths": [str(tmp_path)]})
    context = run.context
    assert sorted(Path(p).name for p in context["snapshot_files"]) == [
        "triage-probe-rank0-call0000-pid1000.json",
        "triage-probe-rank1-call0000-pid1001.json",
    ]
    assert [Path(p).name for p in context["json_files"]] == ["config.json"]
    assert [Path(p).name for p in context["log_files"]] == ["rank0.log"]
    report = analyze(tmp_path)
    assert not [e for e in report.evidence if e.kind.startswith("memory")]
    assert {e.kind for e in report.evidence} >= {"replica_check", "probe_snapshot"}


def test_tags_align_ranks_that_snapshot_a_different_number_of_times(tmp_path: Path) -> None:
    """Rank 0 took an extra snapshot: the call indices shift, the tags still line up."""
    write(tmp_path, 0, 0, [param("w", 1.0)], world=2, tag="warmup")
    for rank in range(2):
        call = 1 if rank == 0 else 0
        write(tmp_path, rank, call, [param("w", 1.0)], world=2, tag="step 10")
        write(tmp_path, rank, call + 1, [param("w", 2.0 + rank)], world=2, tag="step 20")
    found = {c.label: c for c in checks(tmp_path)}
    assert found["step 10"].ranks == [0, 1] and found["step 10"].diverging == []
    (divergence,) = found["step 20"].diverging
    assert divergence.matched_at == "step 10" and divergence.since == "step 20"


def test_only_the_latest_process_of_a_rank_is_compared(tmp_path: Path) -> None:
    for rank in range(2):
        write(tmp_path, rank, 0, [param("w", 9.0 + rank)], world=2, pid=50 + rank)
        write(tmp_path, rank, 0, [param("w", 1.0)], world=2, pid=5000 + rank)
    run = REGISTRY.run("read_probe_snapshots", {"snapshot_files": [str(tmp_path)]})
    (check,) = [e for e in run.evidence if e.kind == "replica_check"]
    assert check.data.get("diverging") is None
    assert any("earlier process of the same rank" in g.reason for g in run.gaps)


def test_thousands_of_rank_tensors_stay_small_and_fast(tmp_path: Path) -> None:
    """512 ranks x 50 parameters, rank 137 off on every parameter: one culprit, bounded
    evidence, read in seconds."""
    names = [f"layers.{i}.weight" for i in range(50)]
    for rank in range(512):
        tensors = [param(n, 2.0 if rank == 137 else 1.0, grad=0.5) for n in names]
        write(tmp_path, rank, 0, tensors, world=512, wrappers=DDP)
    started = time.perf_counter()
    report = analyze(tmp_path)
    elapsed = time.perf_counter() - started
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("wrong.init_mismatch", [137])
    assert "(+" in top.summary  # the first names, then a count
    size = len(report.model_dump_json())
    assert size < 2_000_000, size
    (check,) = [e for e in report.evidence if e.kind == "replica_check"]
    assert check.data["diverging_total"] == 50 and len(check.data["diverging"]) <= 16
    assert elapsed < 20, elapsed
