# mypy: disable-error-code="no-untyped-call"
"""DDP with BatchNorm, buffers not broadcast, no SyncBatchNorm.

Planted fault: the model normalises with plain `BatchNorm1d`, and DDP is built with
`broadcast_buffers=False` (often set to save a broadcast per step, or to silence a
buffer-shape error). Each rank's data shard has its own statistics, so each rank's
running mean and variance drift apart while the parameters stay in sync: evaluation then
depends on which rank's checkpoint is saved (wrong.batchnorm_sync; the fix is
`nn.SyncBatchNorm.convert_sync_batchnorm(model)`).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import triage.probe as probe

STEPS = 3


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    model = DDP(net, broadcast_buffers=False)  # triage: fault (and no SyncBatchNorm)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.snapshot(model, opt, tag="init")
    probe.check_replicas(model, step=0, write=True)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=data) * (1 + rank) + rank  # shards differ
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    probe.snapshot(model, opt, tag=f"step {STEPS - 1}")
    probe.check_replicas(model, step=STEPS, write=True)
    dist.barrier()  # every rank done before any tears gloo down (a racing teardown aborts)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
