# mypy: disable-error-code="no-untyped-call"
"""One rank is stopped (SIGSTOP, as `kill -STOP` or a debugger attach would leave it).

At the fault step the culprit stops itself; it is alive but frozen, while its peers wait
in the gradient all_reduce (hang.rank_not_in_collective).
"""

from __future__ import annotations

import os
import signal

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
            os.kill(os.getpid(), signal.SIGSTOP)  # triage: fault
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
