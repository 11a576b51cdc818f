# mypy: disable-error-code="no-untyped-call"
"""Hand-written data parallelism that never averages the gradients.

Planted fault: the replicas start equal (rank 0's weights are broadcast) and each rank
trains on its own data, but the loop has no all_reduce of the gradients between
backward and the optimizer step (the DDP wrap was removed to debug something and never
put back). Every rank's gradients differ from step 0, so its weights differ from then on
(wrong.unsynced_grads). Snapshots: after init, then after each step.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import triage.probe as probe

STEPS = 3


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    for param in model.parameters():
        dist.broadcast(param.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.snapshot(model, opt, tag="init")
    probe.check_replicas(model, step=0, write=True)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=data)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        # triage: fault (no dist.all_reduce of the gradients here)
        opt.step()
        probe.snapshot(model, opt, tag=f"step {step}")
        probe.check_replicas(model, step=step + 1, write=True)
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.barrier()  # every rank done before any tears gloo down (a racing teardown aborts)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
