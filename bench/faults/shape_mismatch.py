# mypy: disable-error-code="no-untyped-call"
"""One rank all_reduces a tensor of another size than its peers do.

At the fault step the culprit's metrics tensor carries one extra entry (a metric only it
tracks), so the same all_reduce has 3 elements on the culprit and 2 on every other rank
(hang.shape_mismatch).
"""

from __future__ import annotations

import faultjob
import torch
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
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        metrics = [loss.item(), float(step)]
        if rank == bad and step == FAULT_STEP:  # triage: branch
            metrics.append(1.0)
        dist.all_reduce(torch.tensor(metrics))  # triage: fault
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
