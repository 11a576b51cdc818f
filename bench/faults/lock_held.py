# mypy: disable-error-code="no-untyped-call"
"""One rank's main thread waits for a lock that its checkpoint thread never releases.

At the fault step the culprit's background saver takes the state lock and blocks forever
(an upload that never returns); the main thread waits for the lock before the gradient
all_reduce, its peers wait in that all_reduce (hang.rank_not_in_collective).
"""

from __future__ import annotations

import threading

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)

state_lock = threading.Lock()
upload_done = threading.Event()


def save_in_background(held: threading.Event) -> None:
    with state_lock:
        held.set()
        upload_done.wait()  # triage: fault


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            held = threading.Event()
            threading.Thread(target=save_in_background, args=(held,), daemon=True).start()
            held.wait()
        with state_lock:  # triage: fault
            for p in net.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
