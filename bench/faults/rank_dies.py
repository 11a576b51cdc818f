# mypy: disable-error-code="no-untyped-call"
"""One rank dies in the middle of training while its peers wait for it.

FAULT_HOW picks the death: `sigkill` (kill -9 from outside), `exception` (a bad sample
raises) or `exit` (a library calls os._exit(1)). Each is marked with its own name. On gloo
the peers then fail within seconds ("Connection closed by peer"), so what is left is logs
(hang.rank_exited: the dead rank, not the peers that reported the broken connection).
"""

from __future__ import annotations

import os
import signal

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def die(how: str) -> None:
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)  # triage: sigkill
    elif how == "exception":
        raise ValueError("sample 3117 has 15 features, expected 16")  # triage: exception
    else:
        os._exit(1)  # triage: exit


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            die(os.environ.get("FAULT_HOW", "exception"))
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
