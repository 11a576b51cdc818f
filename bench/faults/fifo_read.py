# mypy: disable-error-code="no-untyped-call"
"""One rank blocks on I/O: it opens a FIFO that no process ever writes to.

At the fault step the culprit reads its "control file", a named pipe, whose writer never
comes; `open` blocks in the kernel while its peers wait in the gradient all_reduce
(hang.rank_not_in_collective).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def read_control(path: Path) -> str:
    with open(path) as control:  # triage: fault
        return control.read()


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    control = Path(tempfile.mkdtemp()) / "control"
    os.mkfifo(control)
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            read_control(control)
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
