# mypy: disable-error-code="no-untyped-call"
"""A breakpoint() forgotten in the code, reached by one rank only.

The culprit hits a `breakpoint()` left in for debugging; pdb waits for a command on stdin,
which is open (a pipe nobody writes to, as under a launcher that keeps stdin open), while
its peers wait in the gradient all_reduce (hang.rank_not_in_collective: a debugger).
pdb stops at the line after the call, so both lines are the fault.
"""

from __future__ import annotations

import os
import sys

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def keep_stdin_open() -> None:
    read_end, _write_end = os.pipe()
    os.dup2(read_end, 0)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    keep_stdin_open()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        if rank == bad and step == FAULT_STEP and loss.item() > 0:  # triage: branch
            breakpoint()  # triage: fault
        loss.backward()  # triage: fault
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
