# mypy: disable-error-code="no-untyped-call"
"""A DTensor gathered for logging on one rank only: `full_tensor()` under `if rank == ...`.

The first layer's weight is sharded over a 1-D mesh of every rank. At the fault step the
culprit logs the full weight; `full_tensor()` is an all_gather that its peers never join,
so it waits there while they wait in the gradient all_reduce (hang.mismatched_collective).
"""

from __future__ import annotations

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def main(rank: int, world: int) -> None:
    mesh = init_device_mesh("cpu", (world,))
    net, opt = faultjob.model()
    weight = distribute_tensor(net[0].weight.detach(), mesh, [Shard(0)])
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if rank == bad and step == FAULT_STEP:  # triage: branch
            print("weight norm", weight.full_tensor().norm().item(), flush=True)  # triage: fault
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
