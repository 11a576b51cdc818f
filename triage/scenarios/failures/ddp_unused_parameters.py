# mypy: disable-error-code="no-untyped-call"
"""DDP training where one submodule takes no part in the forward pass.

Planted fault: the model owns an auxiliary head that ``forward`` never calls, and DDP is
built without ``find_unused_parameters=True``. The first backward leaves the head's
gradient buckets unreduced; the second iteration raises DDP's "Expected to have finished
reduction in the prior iteration" on every rank (wrong.unused_parameters).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 1)
        self.aux_head = nn.Linear(32, 4)  # BUG (planted): registered but never used

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(x))
        return out


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1234 + rank)
    for step in range(STEPS):
        x = torch.randn(8, 16, generator=gen)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
