# mypy: disable-error-code="no-untyped-call"
"""A collective on one dimension of a 2-D DeviceMesh, skipped by one rank.

The mesh is (2, WORLD/2), named ("dp", "tp"); each step all_reduces the activations'
statistics over "tp" and the gradients over "dp". At the fault step the culprit skips the
"tp" all_reduce (a rank-dependent `if`): the other members of its tp group wait in it
(hang.mismatched_collective on a mesh dimension's group). Needs a world size of 4 or more.
"""

from __future__ import annotations

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


def main(rank: int, world: int) -> None:
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        hidden = net[1](net[0](x))
        stats = hidden.detach().mean(dim=0)
        if not (rank == bad and step == FAULT_STEP):  # triage: branch
            dist.all_reduce(stats, group=tp)  # triage: fault
        nn.functional.mse_loss(net[2](hidden), y).backward()
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad, group=dp)
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
