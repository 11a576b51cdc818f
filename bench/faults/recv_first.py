# mypy: disable-error-code="no-untyped-call"
"""A ring exchange where every rank receives before it sends.

At the fault step each rank passes its activations to the next rank with a blocking
recv-then-send; every rank waits in `recv` for a neighbour that is itself waiting in
`recv` (hang.p2p_deadlock, every rank involved). FAULT_CULPRIT is unused: the fault is
on every rank.
"""

from __future__ import annotations

import faultjob
import torch
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def pass_along(act: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    got = torch.empty_like(act)
    dist.recv(got, src=(rank - 1) % world)  # triage: fault
    dist.send(act, dst=(rank + 1) % world)
    return got


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if step == FAULT_STEP:
            pass_along(x, rank, world)
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
