# mypy: disable-error-code="no-untyped-call"
"""Uneven shards: the culprit's shard holds one batch fewer, so it leaves the loop first.

The number of steps comes from the local shard; the culprit runs FAULT_STEP + 1 steps,
its peers one more. It waits in the final barrier while its peers wait in the next step's
gradient all_reduce (hang.uneven_inputs).
"""

from __future__ import annotations

import faultjob
import torch.distributed as dist
from faultjob import FAULT_STEP
from torch import nn

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)

BATCH = 8


def shard_size(rank: int, bad: int) -> int:
    full = (FAULT_STEP + 2) * BATCH
    return full - 3 if rank == bad else full  # the last file of the dataset holds the rest


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    n_batches = shard_size(rank, faultjob.culprit()) // BATCH
    for step in range(n_batches):
        if step == n_batches - 1:
            print(faultjob.ARMED, flush=True)
        x, y = faultjob.batch(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()  # triage: fault


if __name__ == "__main__":
    faultjob.start(main)
