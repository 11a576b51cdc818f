# mypy: disable-error-code="no-untyped-call"
"""Data-parallel training where one rank's data loading raises mid-training.

Planted fault: rank 1 hits a corrupt sample at step 3 and raises ValueError in user code.
Its peers are already waiting in the gradient all_reduce; on gloo they fail within seconds
with ``Connection closed by peer``. The culprit is rank 1 (its own traceback); the others
are victims. ``@record`` writes each rank's error file, as torchrun's docs recommend.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

STEPS = 8
BAD_STEP = 3
BAD_RANK = 1


def load_batch(rank: int, step: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(8, 16, generator=gen)
    if rank == BAD_RANK and step == BAD_STEP:
        # BUG (planted): one sample of this rank's shard is truncated.
        problem = f"shard {rank}, batch {step}: expected 16 features, got 15"
        # triage: fault (next line)
        raise ValueError(f"corrupt sample in {problem}")
    return x, x.sum(dim=1, keepdim=True)


def average_gradients(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


@record
def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1234 + rank)
    for step in range(STEPS):
        x, y = load_batch(rank, step, gen)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
