# mypy: disable-error-code="no-untyped-call"
"""A process group created lazily, on the path only some ranks take.

From the fault step on, ranks that have auxiliary labels sum an auxiliary loss over an
`aux` group created on first use; the culprit's shard has no labels, so it never calls
`dist.new_group`, and the members that did wait inside it (hang.subgroup_mismatch: every
member must call new_group, in the same order).
"""

from __future__ import annotations

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)

_aux: list[dist.ProcessGroup] = []


def aux_group(world: int) -> dist.ProcessGroup:
    if not _aux:
        group = dist.new_group(list(range(world)), timeout=faultjob.timeout())  # triage: fault
        assert isinstance(group, dist.ProcessGroup)
        _aux.append(group)
    return _aux[0]


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    bad = faultjob.culprit()
    for step in range(STEPS):
        faultjob.arm(step)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        if step >= FAULT_STEP and rank != bad:  # triage: branch
            aux = loss.detach().clone()
            dist.all_reduce(aux, group=aux_group(world))
        loss.backward()
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
