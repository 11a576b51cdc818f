"""Record triage.probe snapshots of a real 4-rank gloo job whose DeviceMesh is too small.

    .venv/bin/python tests/rules/probe.world_size_mismatch/mesh_short/record.py

The job (this file, run once per rank by triage.scenarios.RankJob) builds its tensor-parallel
mesh from a config value, TP = 2, while the launcher starts 4 processes: init_device_mesh
accepts the 2-rank mesh, ranks 2 and 3 get no place in it and hold empty shards of the
Megatron-style MLP. Every rank writes a triage.probe snapshot after the model is set up;
ranks 0 and 1 then train a step, ranks 2 and 3 fail in their forward. Writes probe/ (the
snapshots) and logs/ (each rank's output) beside this file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB_ENV = "TRIAGE_RECORD_MESH_SHORT_JOB"
TP = 2  # from the training config; the launcher starts 4 processes


def job() -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    import triage.probe as probe

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.down(torch.relu(self.up(x)))
            return out

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (TP,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.snapshot(model, opt, tag="init")
    x = torch.randn(4, 8)
    loss = nn.functional.mse_loss(model(x), x)
    opt.zero_grad()
    loss.backward()
    opt.step()
    probe.snapshot(model, opt, tag="step 0")
    print(f"rank {rank} step 0 loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


def record() -> None:
    from triage.scenarios import RankJob

    for folder in ("probe", "logs"):
        shutil.rmtree(HERE / folder, ignore_errors=True)
    env = {JOB_ENV: "1", "TRIAGE_DUMP_DIR": str(HERE / "probe")}
    with RankJob(Path(__file__), 4, env=env, log_dir=HERE / "logs") as ranks:
        codes = [proc.wait(timeout=180) for proc in ranks.procs]
    print(f"exit codes {codes}; snapshots {len(list((HERE / 'probe').glob('*.json')))}")


if __name__ == "__main__":
    if os.environ.get(JOB_ENV):
        job()
    else:
        record()
