# mypy: disable-error-code="no-untyped-call"
"""A collective inside autograd's backward pass, skipped on one rank.

A custom autograd.Function all_reduces the gradient of the hidden activations in its
backward (a hand-written data-parallel layer); the sync is switched off for a step on one
rank (a gradient-accumulation flag computed per rank). The culprit runs out of collectives
early and waits in the final barrier while its peers wait in the all_reduce inside
`backward`, under `loss.backward()` (hang.mismatched_collective).
"""

from __future__ import annotations

from typing import Any

import faultjob
import torch
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


class SyncGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sync: bool) -> torch.Tensor:
        ctx.sync = sync
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        if ctx.sync:  # triage: branch
            dist.all_reduce(grad)  # triage: fault
        return grad, None


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    first, act, last = net[0], net[1], net[2]
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        sync = not (rank == bad and step == FAULT_STEP)
        hidden = SyncGrad.apply(act(first(x)), sync)
        loss = nn.functional.mse_loss(last(hidden), y)
        loss.backward()
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
