# mypy: disable-error-code="no-untyped-call"
"""One rank's extension call holds the GIL forever, so its main thread cannot run.

At the fault step the culprit starts a thread that calls into C through `ctypes.PyDLL`,
which keeps the GIL for the whole call (a C extension that forgot to release it); the main
thread cannot take the GIL back to reach the gradient all_reduce, where its peers wait
(hang.rank_not_in_collective).
"""

from __future__ import annotations

import ctypes
import threading

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def compress_in_c(started: threading.Event) -> None:
    started.set()
    ctypes.PyDLL(None).sleep(3600)  # triage: fault


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            started = threading.Event()
            threading.Thread(target=compress_in_c, args=(started,), daemon=True).start()
            started.wait()
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
