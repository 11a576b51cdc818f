# mypy: disable-error-code="no-untyped-call"
"""DDP with gradient accumulation, where one rank's batch carries a NaN.

Planted fault: at step 1 the last rank reads a corrupt sample (a NaN feature). Its loss
and its local gradients are NaN at once; the other ranks' are not, until DDP averages
the gradients at the last micro-batch, and from the optimizer step on every rank's
weights are NaN (wrong.nan). Snapshots: after init, after each micro-batch's backward
(the first runs under `no_sync()`: gradients still local), and after each step.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import triage.probe as probe

STEPS = 2
MICRO_BATCHES = 2


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.snapshot(model, opt, tag="init")
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(MICRO_BATCHES):
            x = torch.randn(16, 8, generator=data)
            if step == 1 and rank == world - 1:
                x[3, 5] = float("nan")  # triage: fault (a corrupt sample on one rank)
            last = micro == MICRO_BATCHES - 1
            with contextlib.nullcontext() if last else model.no_sync():
                loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
                (loss / MICRO_BATCHES).backward()
            probe.snapshot(model, opt, tag=f"step {step} micro-batch {micro}")
        opt.step()
        probe.snapshot(model, opt, tag=f"step {step}")
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.barrier()  # every rank done before any tears gloo down (a racing teardown aborts)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
