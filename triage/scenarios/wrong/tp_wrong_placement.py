# mypy: disable-error-code="no-untyped-call"
"""Tensor-parallel MLP where one rank's checkpoint load undoes the sharding.

The MLP is split the Megatron way on a 1-D mesh: `up` ColwiseParallel (weight
Shard(dim=0)), `down` RowwiseParallel (weight Shard(dim=1), one all_reduce per forward).
Planted fault: to resume, rank 0 alone loads the saved weights with
`load_state_dict(..., assign=True)` (the others were to receive them later). `assign`
swaps the parameters for the checkpoint's plain, full tensors, so on rank 0 `up.weight`
is no longer a DTensor sharded on dim 0 while every other rank's still is: the ranks
disagree on the placement of the same parameter (wrong.placement). The snapshot after the
load shows it; rank 0's next forward then mixes a Tensor with DTensors and fails.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

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

STEPS = 2


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(torch.relu(self.up(x)))
        return out


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    loss = nn.functional.mse_loss(model(x), x)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.item())


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    checkpoint = {k: v.clone() for k, v in MLP().state_dict().items()}
    model = MLP()
    parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.snapshot(model, opt, tag="init")
    probe.check_replicas(model, step=0, write=True)
    x = torch.randn(4, 8)  # the same batch on every rank, as tensor parallelism needs
    summary = probe.comm_summary(train_step, model, opt, x)
    out = Path(os.environ.get(probe.DUMP_DIR_ENV, "."))
    (out / f"comm-summary-rank{rank}.json").write_text(json.dumps(summary.to_dict()))
    probe.snapshot(model, opt, tag="step 0")
    if rank == 0:  # triage: fault (one rank swaps its parameters for full plain tensors)
        model.load_state_dict(checkpoint, assign=True)
    probe.snapshot(model, opt, tag="after checkpoint load")
    probe.check_replicas(model, step=1, write=True)
    for step in range(1, STEPS):
        loss = train_step(model, opt, x)
        print(f"rank {rank} step {step} loss {loss:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
