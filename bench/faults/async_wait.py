# mypy: disable-error-code="no-untyped-call"
"""Gradient all_reduces issued with async_op=True, waited on later; one rank skips one.

Each step issues one async all_reduce per gradient and waits for all of them after the
backward pass, in `finish`. At the fault step the culprit skips its all_reduces (a
rank-dependent `if`); it runs out of collectives early and waits in the final barrier,
while its peers wait in `work.wait()`, a line away from the call that never matched
(hang.mismatched_collective; the fault is the skipped async call).
"""

from __future__ import annotations

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def finish(pending: list[dist.Work]) -> None:
    for work in pending:
        work.wait()


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        pending = []
        for p in net.parameters():
            assert p.grad is not None
            if not (rank == bad and step == FAULT_STEP):  # triage: branch
                work = dist.all_reduce(p.grad, async_op=True)  # triage: fault
                assert work is not None
                pending.append(work)
        finish(pending)
        for p in net.parameters():
            assert p.grad is not None
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
