# mypy: disable-error-code="no-untyped-call"
"""A debugging barrier left in on one rank: one collective more than its peers.

At the fault step the culprit calls `dist.barrier()` that no other rank calls; it waits
there while its peers wait in the gradient all_reduce (hang.mismatched_collective).
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
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            dist.barrier()  # triage: fault
        faultjob.average_gradients(net, world)
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
