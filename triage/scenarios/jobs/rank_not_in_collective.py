# mypy: disable-error-code="no-untyped-call"
"""Data-parallel training where one rank never reaches the gradient all_reduce.

Planted fault: rank 2's data loader waits for a shard file that never appears (a stuck
network filesystem, a producer that died), polling with sleep and no timeout. Ranks 0, 1
and 3 sit in the gradient all_reduce waiting for it (hang.rank_not_in_collective).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

STEPS = 10
STALL_STEP = 3


def slow_rank(world: int) -> int:
    return min(2, world - 1)


def average_gradients(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # triage: wait
            p.grad /= world


def wait_for_shard(path: Path) -> None:
    while not path.exists():
        time.sleep(1.0)  # triage: fault


def batches(rank: int, world: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1234 + rank)
    for step in range(STEPS):
        if step == STALL_STEP:
            print("TRIAGE-SCENARIO: armed", flush=True)
            if rank == slow_rank(world):
                # BUG: no timeout; the shard never shows up.
                wait_for_shard(Path(f"/nonexistent/shards/part-{rank:05d}-{step:05d}.pt"))
        yield torch.randn(8, 16, generator=gen), torch.randn(8, 1, generator=gen)


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    for step, (x, y) in enumerate(batches(rank, dist.get_world_size())):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
