# mypy: disable-error-code="no-untyped-call"
"""One rank sleeps (a retry loop's back-off gone wrong) while its peers wait in a collective.

At the fault step the culprit sleeps for an hour before the gradient all_reduce; its peers
wait in that all_reduce (hang.rank_not_in_collective).
"""

from __future__ import annotations

import time

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
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            time.sleep(3600)  # triage: fault
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
