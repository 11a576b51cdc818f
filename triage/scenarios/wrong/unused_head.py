# mypy: disable-error-code="no-untyped-call"
"""DDP multi-task training whose auxiliary head sits out some steps.

Planted fault: the auxiliary head is used only on odd steps (a task schedule), and DDP is
built with the default `find_unused_parameters=False`. At step 0 the head takes no part
in the forward pass: its parameters get no gradient, so DDP's bucket is never complete
and nothing is all-reduced (the body's gradients stay each rank's own). The snapshot
right after that backward shows it; the next forward then raises DDP's "Expected to have
finished reduction in the prior iteration" on every rank (wrong.unused_parameters).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import triage.probe as probe

STEPS = 3


class MultiTask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)
        self.aux_head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor, aux: bool) -> torch.Tensor:
        features = self.body(x)
        out: torch.Tensor = self.head(features).sum()
        if aux:  # triage: fault (the head sits out even steps)
            out = out + self.aux_head(features).sum()
        return out


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(MultiTask())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    probe.snapshot(model, opt, tag="init")
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        x = torch.randn(16, 8, generator=data)
        loss = model(x, aux=step % 2 == 1) / 16
        opt.zero_grad()
        loss.backward()
        probe.snapshot(model, opt, tag=f"step {step} after backward")
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
