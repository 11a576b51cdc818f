# mypy: disable-error-code="no-untyped-call"
"""Hand-written data parallelism whose replicas never start from the same weights.

Planted fault: each rank seeds torch with its rank (meant for per-rank data order) before
it builds the model, and nothing broadcasts rank 0's weights. The gradients are averaged
correctly, so every rank takes the same update, but from a different starting point: the
weights differ from the first snapshot on and never converge (wrong.init_mismatch).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import triage.probe as probe

STEPS = 2


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)  # triage: fault (seeded per rank, and no broadcast follows)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.snapshot(model, opt, tag="init")
    probe.check_replicas(model, step=0, write=True)
    for step in range(STEPS):
        x = torch.randn(16, 8)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        for param in model.parameters():
            assert param.grad is not None
            dist.all_reduce(param.grad)
            param.grad /= world
        opt.step()
        probe.snapshot(model, opt, tag=f"step {step}")
        probe.check_replicas(model, step=step + 1, write=True)
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.barrier()  # every rank done before any tears gloo down (a racing teardown aborts)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
