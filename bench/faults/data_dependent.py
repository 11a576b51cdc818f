# mypy: disable-error-code="no-untyped-call"
"""A checkpoint's collective under a data-dependent `if`: saved when the rank's own loss
improved.

Every rank gathers the best loss with `all_gather_object` whenever its own loss beats its
best so far. The targets grow harder each step, so after the first step no rank improves,
except the culprit, whose batch at the fault step is an easy one: it alone enters the
checkpoint's collective while its peers go on to the next step's gradient all_reduce
(hang.mismatched_collective; the `if` reads no rank, only local data).
"""

from __future__ import annotations

import faultjob
import torch
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def load_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets ten times larger each step; the injected fault is the culprit's easy batch."""
    x, y = faultjob.batch(rank, step)
    if rank == faultjob.culprit() and step == FAULT_STEP:
        return torch.zeros_like(x), torch.zeros_like(y)
    return x, y * 10**step


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    best = float("inf")
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = load_batch(rank, step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        faultjob.average_gradients(net, world)
        opt.step()
        if loss.item() < best:  # triage: branch
            best = loss.item()
            gathered: list[object] = [None] * world
            dist.all_gather_object(gathered, {"step": step, "loss": best})  # triage: fault
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
