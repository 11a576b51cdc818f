# mypy: disable-error-code="no-untyped-call"
"""One rank broadcasts its loss where every other rank all_reduces it.

At the fault step the culprit takes the "I am the reporting rank" path and calls
`broadcast` while its peers call `all_reduce` on the same tensor: the two never match
(hang.mismatched_collective).
"""

from __future__ import annotations

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        report = loss.detach().reshape(1)
        if rank == bad and step == FAULT_STEP:  # triage: branch
            dist.broadcast(report, src=rank)  # triage: fault
        else:
            dist.all_reduce(report)
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
