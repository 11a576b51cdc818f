# mypy: disable-error-code="no-untyped-call"
"""One rank waits on an irecv that no rank ever sends to.

At the fault step the culprit posts `dist.irecv` for a "stop signal" from the next rank
and waits on it; no rank sends one. The culprit waits in the receive, its peers in the
gradient all_reduce (hang.p2p_deadlock: an unmatched receive).
"""

from __future__ import annotations

import faultjob
import torch
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    stop = torch.zeros(1)
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            dist.irecv(stop, src=(rank + 1) % world).wait()  # triage: fault
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
