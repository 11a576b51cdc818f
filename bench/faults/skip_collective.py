# mypy: disable-error-code="no-untyped-call"
"""A gradient all_reduce skipped once by one rank under a rank- and step-dependent `if`.

The culprit runs out of collectives one call early: it waits in the final barrier while
its peers wait in the last step's all_reduce (hang.mismatched_collective; the fault is
the skipped call, which is where the peers wait).
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
        for p in net.parameters():
            assert p.grad is not None
            if not (rank == bad and step == FAULT_STEP):  # triage: branch
                dist.all_reduce(p.grad)  # triage: fault
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
