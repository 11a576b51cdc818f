"""triage.probe inside one process: what a snapshot holds, what it hides, how it fails.

The snapshots here come from a real gloo group of world size 1 in this process (the probe
is imported with its import-time signal handler off, so this process keeps SIGUSR1 as it
was). The signal path runs in a child process, which is killed whatever happens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import requires_torch
from triage.job import probe_protocol, probe_signal
from triage.observations import ProbeSnapshot
from triage.readers.safe_pickle import load_untrusted
from triage.scenarios import free_port

with pytest.MonkeyPatch.context() as _env:
    _env.setenv("TRIAGE_FR_SIGNAL", "off")
    import triage.probe as probe
    from triage.probe import _common, _replicas, _snapshot

pytestmark = requires_torch
NAME = re.compile(r"^triage-probe-rank(\d+|x)-call(\d{4})-pid(\d+)\.json$")


@pytest.fixture(scope="module")
def world() -> Iterator[Any]:
    """A gloo group of one rank in this process: torch.distributed, initialised."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", free_port(), 1, True, timeout=timedelta(seconds=30))  # type: ignore[attr-defined]
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def read(path: Path | None) -> ProbeSnapshot:
    assert path is not None and NAME.match(path.name), path
    return ProbeSnapshot.model_validate_json(path.read_text())


def digest(tensor: Any) -> str:
    """The checksum the contract defines, computed the slow and obvious way."""
    data = tensor.detach().contiguous().view(-1).view(dtype=__import__("torch").uint8)
    return hashlib.blake2b(bytes(data.tolist()), digest_size=16).hexdigest()


def test_a_snapshot_holds_the_model_as_this_rank_sees_it(world: Any, tmp_path: Path) -> None:
    import torch
    from torch import nn

    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    ddp = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(ddp.parameters())
    ddp(torch.randn(5, 4)).sum().backward()
    opt.step()
    snap = read(probe.snapshot(ddp, opt, tag="step 1", directory=tmp_path, flight_recorder=True))
    assert (snap.rank, snap.world_size, snap.backend, snap.reason) == (0, 1, "gloo", "call")
    assert (snap.tag, snap.model, snap.wrappers) == (
        "step 1",
        "Sequential",
        ["DistributedDataParallel"],
    )
    assert [g.ranks for g in snap.groups] == [[0]] and snap.groups[0].backend == "gloo"
    by_name = {t.name: t for t in snap.tensors}
    assert list(by_name) == [
        *(n for n, _ in net.named_parameters()),
        *(n for n, _ in net.named_buffers()),
    ]  # the names the user's own module gives, without DDP's `module.`
    weight = by_name["0.weight"]
    assert (weight.kind, weight.shape, weight.dtype, weight.device) == (
        "parameter",
        [3, 4],
        "torch.float32",
        "cpu",
    )
    assert weight.value is not None and weight.grad is not None
    first = cast(nn.Linear, net[0])  # Sequential indexes as a plain Module
    assert weight.value.checksum == digest(first.weight)
    assert weight.grad.checksum == digest(first.weight.grad)
    assert weight.value.sum == pytest.approx(first.weight.double().sum().item())
    assert weight.value.norm == pytest.approx(first.weight.double().norm().item())
    running = by_name["1.running_mean"]
    assert running.kind == "buffer" and running.grad is None and running.placements is None
    assert snap.optimizer is not None and snap.optimizer["class"] == "Adam"
    assert snap.optimizer["state_tensors"] == 3 * len(list(net.parameters()))
    assert snap.cuda_memory is None and snap.errors == []
    # the Flight Recorder dump, when asked for, is torch's own, beside the snapshot
    assert snap.flight_recorder is not None
    dump = load_untrusted(tmp_path / snap.flight_recorder)
    assert "entries" in dump and "pg_config" in dump
    # the caller's line is the main thread's innermost frame: the probe's own are left out
    main = next(s for s in snap.stacks if s.thread == "MainThread")
    assert (main.frames[0].function, main.frames[0].file) == (
        "test_a_snapshot_holds_the_model_as_this_rank_sees_it",
        __file__,
    )


def test_calls_are_numbered_and_files_never_overwritten(world: Any, tmp_path: Path) -> None:
    first = probe.snapshot(directory=tmp_path)
    second = probe.snapshot(directory=tmp_path)
    assert first is not None and second is not None
    calls = [int(NAME.match(p.name).group(2)) for p in (first, second)]  # type: ignore[union-attr]
    assert calls[1] == calls[0] + 1
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted([first.name, second.name])
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_dtensor_placements_and_meshes(world: Any, tmp_path: Path) -> None:
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    snap = read(probe.snapshot(mlp, directory=tmp_path))
    placements = {t.name: t.placements for t in snap.tensors}
    assert placements == {
        "0.weight": ["Shard(dim=0)"],
        "0.bias": ["Shard(dim=0)"],
        "2.weight": ["Shard(dim=1)"],
        "2.bias": ["Replicate()"],
    }
    assert [m.model_dump() for m in snap.meshes] == [
        {"device_type": "cpu", "shape": [1], "dim_names": ["tp"], "ranks": [0]}
    ]
    assert {t.mesh for t in snap.tensors} == {0}
    assert snap.tensors[0].local_shape == [8, 4]


def test_nonfinite_values_are_counted_not_written(world: Any, tmp_path: Path) -> None:
    import torch
    from torch import nn

    layer = nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight[0, 0] = float("nan")
        layer.weight[1, 2] = float("inf")
    path = probe.snapshot(layer, directory=tmp_path)
    assert path is not None and "NaN" not in path.read_text()  # strict JSON
    weight = read(path).tensors[0]
    assert weight.value is not None
    assert (weight.value.nonfinite, weight.value.sum, weight.value.norm) == (2, None, None)


def test_secrets_in_the_environment_are_redacted(
    world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("TORCH_HUB_TOKEN", "hf_" + "a" * 34)
    monkeypatch.setenv("MASTER_ADDR", "https://trainer:hunter2@store.internal")
    monkeypatch.setenv("HOME_SECRET_NOT_SELECTED", "x")
    env = read(probe.snapshot(directory=tmp_path)).environment
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert env["TORCH_HUB_TOKEN"] == "[REDACTED]"
    assert "hunter2" not in env["MASTER_ADDR"] and "store.internal" in env["MASTER_ADDR"]
    assert "HOME_SECRET_NOT_SELECTED" not in env and "PATH" not in env


def test_what_fails_becomes_one_line_in_errors(
    world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from torch import nn

    class BrokenOptimizer:
        @property
        def param_groups(self) -> list[Any]:
            raise RuntimeError("state was offloaded")

    def no_recorder() -> bytes:
        raise RuntimeError("this torch has no Flight Recorder dump call")

    monkeypatch.setattr(_snapshot, "flight_recorder_bytes", no_recorder)
    model = nn.Linear(2, 2, device="meta")  # no bytes to read
    snap = read(probe.snapshot(model, BrokenOptimizer(), directory=tmp_path, flight_recorder=True))
    assert snap.optimizer is None and snap.flight_recorder is None
    assert any(e.startswith("optimizer: RuntimeError: state was offloaded") for e in snap.errors)
    assert any(e.startswith("Flight Recorder: RuntimeError") for e in snap.errors)
    assert any(e.startswith("weight: value:") for e in snap.errors)
    assert [t.name for t in snap.tensors] == ["weight", "bias"]  # the rest is still there
    assert all("\n" not in e for e in snap.errors)
    # a folder that cannot be written: no file, no exception
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert probe.snapshot(torch.nn.Linear(1, 1), directory=blocked / "sub") is None


def test_the_signal_path_never_reads_accelerator_tensors(world: Any, tmp_path: Path) -> None:
    from torch import nn

    model = nn.Linear(2, 2, device="meta")  # stands for a GPU whose stream may be stuck
    snap = read(_snapshot.take(model, reason="signal", directory=tmp_path))
    assert snap.reason == "signal"
    assert all(t.value is None and t.grad is None for t in snap.tensors)
    assert snap.errors == [f"{_snapshot.GPU_NOT_READ}: 2 tensors without content stats"]


def test_replica_verdicts_name_outliers_and_the_first_step() -> None:
    def entry(checksum: str, norm: float, grad: str | None = None) -> dict[str, Any]:
        stats = {"checksum": checksum, "sum": 0.0, "norm": norm, "nonfinite": 0}
        grad_stats = dict(stats, checksum=grad) if grad else None
        return {
            "kind": "parameter",
            "placements": None,
            "replica_of": None,
            "value": stats,
            "grad": grad_stats,
        }

    gathered = {
        0: {"w": entry("a", 1.0, "g"), "b": entry("x", 2.0, "h")},
        1: {"w": entry("a", 1.0, "g"), "b": entry("x", 2.0)},
        2: {"w": entry("c", 1.5, "g"), "b": entry("x", 2.0, "h")},
    }
    compared, found = _replicas._verdict(gathered)
    assert compared == 2
    verdicts = {(d.name, d.what): d for d in found}
    assert set(verdicts) == {("w", "value"), ("b", "grad_presence")}
    w = verdicts[("w", "value")]
    assert (w.ranks, w.agreeing, w.max_relative_diff) == ([2], [0, 1], pytest.approx(0.5))  # type: ignore[comparison-overlap]
    assert verdicts[("b", "grad_presence")].ranks == [1]
    # two ranks, two values: no majority, both are listed
    _, tie = _replicas._verdict({0: {"w": entry("a", 1.0)}, 1: {"w": entry("b", 3.0)}})
    assert (tie[0].ranks, tie[0].agreeing, tie[0].max_relative_diff) == ([0, 1], [], 2.0)


def test_check_replicas_says_since_which_step(
    world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second rank is simulated at the gather: it holds a copy of this rank's tensors,
    with a different weight from step 2 on."""
    from torch import nn

    layer = nn.Linear(2, 2)
    step = {"now": 0}

    def gather(out: list[Any], mine: Any, group: Any = None) -> None:
        other = json.loads(json.dumps(mine))
        if step["now"] >= 2:
            other["weight"]["value"] |= {
                "checksum": "other",
                "norm": 2 * mine["weight"]["value"]["norm"],
            }
        out[:] = [mine, other]

    monkeypatch.setattr(world, "all_gather_object", gather)
    monkeypatch.setattr(world, "get_process_group_ranks", lambda group: [0, 1])
    results = []
    for now in range(4):
        step["now"] = now
        results.append(probe.check_replicas(layer, step=now, write=True, directory=tmp_path))
    assert [r.ok for r in results] == [True, True, False, False]
    late = results[3]
    assert (late.ranks, late.compared, late.names()) == ([0, 1], 2, ["weight"])
    [weight] = late.diverging
    assert (weight.what, weight.ranks, weight.since_step) == ("value", [0, 1], 2)
    assert weight.max_relative_diff == pytest.approx(1.0)
    written = sorted(tmp_path.glob("triage-replicas-rank0-step*.json"))
    assert len(written) == 4 and json.loads(written[3].read_text()) == late.to_dict()
    step["now"] = 0  # agreeing again ends the run: a new divergence starts anew
    assert probe.check_replicas(layer, step=4).ok
    step["now"] = 5
    assert probe.check_replicas(layer, step=5).diverging[0].since_step == 5
    assert probe.check_replicas(layer).step == 6  # numbered on when not given


def test_comm_summary_returns_the_result_and_counts(world: Any) -> None:
    import torch

    summary = probe.comm_summary(lambda x: x * 2, torch.ones(2))
    assert torch.equal(summary.result, torch.full((2,), 2.0))
    assert (summary.total, summary.per_op) == (0, {})
    assert "Global" in summary.per_module and "\x1b" not in summary.table
    assert "result" not in summary.to_dict()


def test_the_sender_and_the_probe_agree_on_the_protocol(tmp_path: Path) -> None:
    name = _snapshot.file_name(3, 12)
    assert NAME.match(name)
    (tmp_path / name).write_text("{}")
    assert probe_signal.snapshots_of(tmp_path, os.getpid()) == {tmp_path / name}
    assert _common.DIR_ENV == probe_protocol.FR_DIR_ENV and probe.THREAD_NAME == "triage-probe"
    assert probe_protocol.signal_of(probe_protocol.thread_name(10, True)) == 10
    assert probe_protocol.signal_of(probe_protocol.thread_name(10, False)) is None


def test_importing_the_probe_imports_neither_torch_nor_pydantic() -> None:
    code = (
        "import sys, triage.probe as p;"
        " print(sorted(m for m in ('torch', 'pydantic', 'numpy') if m in sys.modules),"
        " p.installed() is not None)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["[]", "True"]


# -- the signal path, in a child process ----------------------------------------------------

SIGNALLED = """\
import sys, time, torch
import triage.probe as probe
model = torch.nn.Linear(3, 1)
assert probe.install(model) is probe.install()  # attaches to the import-time install
print("ready", flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def child(code: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """The code in a child process, working in the snapshot folder (so the probe's
    default ./triage-fr lands there too), killed on the way out."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=env["TRIAGE_DUMP_DIR"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_signal_makes_an_installed_rank_write_a_snapshot(tmp_path: Path) -> None:
    env = dict(os.environ, TRIAGE_DUMP_DIR=str(tmp_path), TRIAGE_FR_DIR=str(tmp_path / "fr"))
    with child(SIGNALLED, env) as proc:
        assert probe_signal.probe_signal(proc.pid) == signal.SIGUSR1
        assert probe_signal.catches(proc.pid, signal.SIGUSR1)
        asked = probe_signal.request_snapshots([proc.pid], wait_s=60)
        assert asked.sent == [proc.pid] and asked.gaps == []
        assert proc.poll() is None  # the rank lives on
    [path] = map(Path, asked.files)
    snap = read(path)
    assert (snap.reason, snap.pid, snap.model, snap.rank) == ("signal", proc.pid, "Linear", None)
    assert [t.name for t in snap.tensors] == ["weight", "bias"]
    assert all(t.value is not None for t in snap.tensors)  # CPU tensors are read
    main = next(s for s in snap.stacks if s.thread == "MainThread")
    # in time.sleep, or still returning from the ready print when the signal lands
    assert main.frames[0].function == "<module>" and main.frames[0].line in (5, 6)
    assert "--signal-probe: sent triage.probe's signal to 1 ranks" in asked.note()


def test_processes_without_the_probe_are_never_signalled(tmp_path: Path) -> None:
    env = dict(os.environ, TRIAGE_DUMP_DIR=str(tmp_path))
    plain = "import time; print('ready', flush=True); time.sleep(120)"
    own = (
        "import signal, time; signal.signal(signal.SIGUSR1, lambda *a: print('requeue!'));"
        " print('ready', flush=True); time.sleep(120)"
    )
    with child(plain, env) as bare, child(own, env) as slurm:
        started = time.monotonic()
        asked = probe_signal.request_snapshots([bare.pid, slurm.pid], wait_s=5)
        assert time.monotonic() - started < 5  # nobody was waited for
        assert asked.sent == [] and asked.files == []
        reasons = {g.source: g.reason for g in asked.gaps}
        assert "runs no triage.probe thread" in reasons[f"pid:{bare.pid}"]
        assert "runs no triage.probe thread" in reasons[f"pid:{slurm.pid}"]
        assert bare.poll() is None and slurm.poll() is None
    assert asked.note() == "--signal-probe: no rank was signalled (see gaps)"


MOVED = """\
import signal, time, torch
import triage.probe as probe
probe.install(torch.nn.Linear(2, 1), signal=signal.SIGUSR2)
print("ready", flush=True)
time.sleep(120)
"""

TAKEN_OVER = """\
import signal, time
import triage.probe
signal.signal(signal.SIGUSR1, lambda *a: print("requeue!", flush=True))
print("ready", flush=True)
time.sleep(120)
"""


def test_the_probe_moves_to_another_signal_and_says_so(tmp_path: Path) -> None:
    with child(MOVED, dict(os.environ, TRIAGE_DUMP_DIR=str(tmp_path))) as proc:
        assert probe_signal.probe_signal(proc.pid) == signal.SIGUSR2
        assert not probe_signal.catches(proc.pid, signal.SIGUSR1)  # its default is back
        asked = probe_signal.request_snapshots([proc.pid], wait_s=60)
        assert asked.sent == [proc.pid] and len(asked.files) == 1
        assert proc.poll() is None


def test_a_signal_the_job_takes_over_is_left_alone(tmp_path: Path) -> None:
    with child(TAKEN_OVER, dict(os.environ, TRIAGE_DUMP_DIR=str(tmp_path))) as proc:
        deadline = time.monotonic() + 30
        while probe_signal.probe_signal(proc.pid) is not None:  # renamed within a second
            assert time.monotonic() < deadline
            time.sleep(0.05)
        asked = probe_signal.request_snapshots([proc.pid], wait_s=5)
        assert asked.sent == [] and "runs no triage.probe thread" in asked.gaps[0].reason
    assert proc.stdout is not None and "requeue!" not in proc.stdout.read()


def test_where_a_rank_writes_follows_its_environment(tmp_path: Path) -> None:
    pid = os.getpid()
    here = Path(os.getcwd())
    assert probe_signal.snapshot_dir(pid, {}) == here / "triage-dumps"
    assert probe_signal.snapshot_dir(pid, {"TRIAGE_DUMP_DIR": "out"}) == here / "out"
    assert probe_signal.snapshot_dir(pid, {"TRIAGE_DUMP_DIR": str(tmp_path)}) == tmp_path


def test_the_snapshot_names_its_flight_recorder_for_the_playbook(tmp_path: Path) -> None:
    dump = tmp_path / "fr" / "nccl_trace_rank_0"
    dump.parent.mkdir()
    dump.write_bytes(b"\x80")
    snap = tmp_path / "dumps" / "triage-probe-rank0-call0000-pid1.json"
    snap.parent.mkdir()
    snap.write_text(json.dumps({"flight_recorder": "../fr/nccl_trace_rank_0"}))
    asked = probe_signal.SnapshotRequest(sent=[1], files=[str(snap)])
    assert asked.evidence_paths() == [str(snap), str(dump)]
