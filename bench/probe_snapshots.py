"""How long `triage analyze` takes on triage.probe snapshots of 1,024 ranks x 500 parameters,
against reading the same files with `json.loads` alone.

One snapshot per rank is written to a temporary folder in the probe's own format (the keys
and order `triage.probe.snapshot()` writes: the default group of every rank, DDP, 500
parameters with value and gradient stats, an Adam record, the main thread's stack, the
launcher's variables), and one rank's gradients are planted unreduced. Both run in this
run, as subprocesses: `triage analyze DIR --json` (the median of --repeat runs) and a plain
Python that `json.loads` every file, the least any reader pays. The verdict must name the
planted rank as `wrong.unsynced_grads`.

Target: under 3 s at 1,024 x 500, with that verdict.

    python bench/probe_snapshots.py [--ranks 1024] [--params 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_SECONDS = 3.0
CAUSE = "wrong.unsynced_grads"
LOAD_ALL = (
    "import json, pathlib, sys\n"
    "for path in sorted(pathlib.Path(sys.argv[1]).glob('*.json')):\n"
    "    json.loads(path.read_bytes())\n"
)


def _stats(content: str) -> dict[str, Any]:
    digest = hashlib.blake2b(content.encode(), digest_size=16).hexdigest()
    norm = int(digest[:6], 16) / 2**20
    return {"checksum": digest, "sum": norm / 3, "norm": norm, "nonfinite": 0}


def _tensors(params: int, planted: bool) -> list[dict[str, Any]]:
    """Parameters of a deep MLP as DDP holds them: the same values and reduced gradients on
    every rank, except the planted rank's gradients (a no_sync() left on)."""
    out = []
    for index in range(params):
        name = f"layers.{index // 2}.{'weight' if index % 2 == 0 else 'bias'}"
        shape = [1024, 1024] if index % 2 == 0 else [1024]
        grad = f"{name} grad" + (" unreduced" if planted else "")
        out.append(
            {
                "name": name,
                "kind": "parameter",
                "shape": shape,
                "local_shape": None,
                "dtype": "torch.float32",
                "device": "cpu",
                "requires_grad": True,
                "placements": None,
                "mesh": None,
                "value": _stats(f"{name} value"),
                "grad": _stats(grad),
            }
        )
    return out


def snapshot(rank: int, world: int, tensors: list[dict[str, Any]]) -> dict[str, Any]:
    """One rank's snapshot at `step 100`, keys in the order triage.probe writes them."""
    pid = 10_000 + rank
    frames = [
        {"function": "snapshot_step", "file": "/job/train.py", "line": 57},
        {"function": "train", "file": "/job/train.py", "line": 88},
        {"function": "<module>", "file": "/job/train.py", "line": 120},
    ]
    return {
        "format": "triage.probe/1",
        "rank": rank,
        "world_size": world,
        "local_rank": rank % 8,
        "backend": "nccl",
        "host": f"node{rank // 8:04d}",
        "pid": pid,
        "time": 1_700_000_000.0 + rank / 1000,
        "call": 0,
        "tag": "step 100",
        "reason": "call",
        "model": "MLP",
        "wrappers": ["DistributedDataParallel"],
        "groups": [
            {
                "name": "0",
                "ranks": list(range(world)),
                "backend": "nccl",
                "description": "default_pg",
            }
        ],
        "meshes": [],
        "tensors": tensors,
        "optimizer": {
            "class": "Adam",
            "param_groups": [{"params": len(tensors), "lr": 0.0003, "betas": [0.9, 0.999]}],
            "state_tensors": 2 * len(tensors),
            "state_bytes": 8 * len(tensors) << 20,
        },
        "cuda_memory": None,
        "flight_recorder": None,
        "stacks": [{"thread": "MainThread", "thread_id": 140_000_000 + rank, "frames": frames}],
        "environment": {
            "LOCAL_RANK": str(rank % 8),
            "MASTER_ADDR": "node0000",
            "MASTER_PORT": "29500",
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
        },
        "errors": [],
    }


def write_snapshots(folder: Path, ranks: int, params: int, culprit: int) -> None:
    same, odd = _tensors(params, False), _tensors(params, True)
    for rank in range(ranks):
        data = snapshot(rank, ranks, odd if rank == culprit else same)
        name = f"triage-probe-rank{rank}-call0000-pid{data['pid']}.json"
        (folder / name).write_text(json.dumps(data, allow_nan=False))


def timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall and CPU seconds (user + system: what other users of a shared machine do not
    change) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done


def verdict(done: subprocess.CompletedProcess[str]) -> tuple[str, list[int]] | None:
    if done.returncode != 0:
        return None
    top = json.loads(done.stdout)["hypotheses"][0]
    return top["cause_id"], top["ranks"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--params", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    culprit = args.ranks * 2 // 3
    triage = [str(Path(sys.executable).parent / "triage"), "analyze", "--json"]
    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        folder = Path(tmp)
        write_snapshots(folder, args.ranks, args.params, culprit)
        size = sum(p.stat().st_size for p in folder.iterdir())
        baseline, ours, verdicts = [], [], set()
        for _ in range(args.repeat):
            baseline.append(timed([sys.executable, "-c", LOAD_ALL, tmp])[:2])
            wall, cpu, done = timed([*triage, tmp])
            ours.append((wall, cpu))
            found = verdict(done)
            verdicts.add(f"{found[0]} {found[1]}" if found else f"failed: {done.stderr[-200:]}")
    base = [statistics.median(runs) for runs in zip(*baseline, strict=True)]
    mine = [statistics.median(runs) for runs in zip(*ours, strict=True)]
    right = verdicts == {f"{CAUSE} {[culprit]}"}
    met = right and mine[0] < TARGET_SECONDS
    print(
        f"snapshots          {args.ranks} ranks x {args.params} parameters, {size / 2**20:.0f} MB"
    )
    print(f"json.loads alone   median {base[0]:6.2f} s wall {base[1]:6.2f} s CPU")
    print(
        f"triage analyze     median {mine[0]:6.2f} s wall {mine[1]:6.2f} s CPU"
        f"  ({mine[0] / base[0]:.2f}x json.loads wall, {mine[1] / base[1]:.2f}x CPU)"
    )
    print(f"verdicts           {'; '.join(sorted(verdicts))} (planted: rank {culprit})")
    print(
        f"target             < {TARGET_SECONDS:.0f} s with {CAUSE} on rank {culprit}: "
        f"{'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
