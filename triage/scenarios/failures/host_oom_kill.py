# mypy: disable-error-code="no-untyped-call"
"""Data-parallel training where the kernel's OOM killer takes one rank.

Planted fault: rank 1 caches every batch it loads (a host-memory leak) and at step 3 is
killed with SIGKILL, exactly what the kernel OOM killer sends; nothing is printed by the
dying rank. Its peer fails with gloo's ``Connection closed by peer`` and torchrun reports
the rank's exit code -9 (oom.host when nothing else explains a SIGKILL).
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

STEPS = 8
KILL_STEP = 3
KILLED_RANK = 1


def average_gradients(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1234 + rank)
    cache: list[torch.Tensor] = []  # BUG (planted): grows every step, never freed
    for step in range(STEPS):
        x = torch.randn(8, 16, generator=gen)
        cache.append(x)
        if rank == KILLED_RANK and step == KILL_STEP:
            # triage: fault (next line)
            os.kill(os.getpid(), signal.SIGKILL)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
