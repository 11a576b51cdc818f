# mypy: disable-error-code="no-untyped-call"
"""Data-parallel training where only rank 0 enters an extra collective.

Planted fault: at step 3 rank 0 decides on early stopping and broadcasts the flag, but the
broadcast sits inside ``if rank == 0`` so no other rank joins it. Ranks 1..3 go on to the
next step's gradient all_reduce. Rank 0 waits in broadcast, the others in all_reduce:
different collectives, nobody can finish (hang.mismatched_collective).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

STEPS = 10
CHECK_STEP = 3


def average_gradients(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)  # triage: wait
            p.grad /= world


def should_stop(loss: float) -> bool:
    return loss < 0.0  # never true; the broadcast below is what matters


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1234 + rank)

    for step in range(STEPS):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 1, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if step == CHECK_STEP:
            print("TRIAGE-SCENARIO: armed", flush=True)
            if rank == 0:
                # BUG: a collective inside a rank-0-only branch; the other ranks never join.
                stop = torch.tensor([int(should_stop(loss.item()))])
                dist.broadcast(stop, src=0)  # triage: fault
        average_gradients(model)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
