# mypy: disable-error-code="no-untyped-call"
"""A rank dies at start-up while its peers wait for it in init_process_group.

Planted fault: rank 3 cannot find its data shard and raises (exits with status 1) before it
joins the process group. Ranks 0..2 wait in init_process_group's rendezvous for a rank that
will never come (hang.rank_exited).

On gloo a rank that dies *after* init makes its peers fail within seconds ("Connection
closed by peer"), so the hang that really happens on gloo is the one at start-up.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

STEPS = 10
DATA_DIR = Path(os.environ.get("TRIAGE_SCENARIO_DATA", "/tmp/triage-scenario-data"))


def average_gradients(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def load_shard(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234 + rank)
    if rank == world - 1:
        # BUG (planted): the last shard is missing; this rank dies before init_process_group.
        path = DATA_DIR / f"shard-{rank:05d}-of-{world:05d}.pt"
        raise FileNotFoundError(f"rank {rank}: missing data shard {path}")  # triage: fault
    return torch.randn(64, 16, generator=gen), torch.randn(64, 1, generator=gen)


def main() -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    xs, ys = load_shard(rank, world)
    print("TRIAGE-SCENARIO: armed", flush=True)
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))  # triage: wait
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    for step in range(STEPS):
        x, y = xs[step * 8 : (step + 1) * 8], ys[step * 8 : (step + 1) * 8]
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
