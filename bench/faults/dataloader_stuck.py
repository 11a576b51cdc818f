# mypy: disable-error-code="no-untyped-call"
"""One rank's DataLoader worker blocks in `__getitem__`, so the rank waits for a batch.

The culprit's dataset reads a sample from a remote store whose request never returns (a
sleep stands in for it) in its single DataLoader worker process; the rank's main thread
waits for that batch while its peers wait in the gradient all_reduce
(hang.rank_not_in_collective: data loading).
"""

from __future__ import annotations

import time

import faultjob
import torch
import torch.distributed as dist
from faultjob import FAULT_STEP, STEPS
from torch import nn
from torch.utils.data import DataLoader, Dataset

import triage.probe  # noqa: F401  (a Flight Recorder dump on the probe's signal)


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, rank: int, stuck: bool) -> None:
        self.rank, self.stuck = rank, stuck

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.stuck and step == FAULT_STEP:  # triage: branch
            time.sleep(3600)  # triage: fault
        return faultjob.batch(self.rank, step)


def main(rank: int, world: int) -> None:
    net, opt = faultjob.model()
    data = Samples(rank, stuck=rank == faultjob.culprit())
    loader = DataLoader(data, batch_size=None, num_workers=1)
    for step, (x, y) in enumerate(loader):  # triage: fault
        if step == FAULT_STEP - 1:
            print(faultjob.ARMED, flush=True)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        for p in net.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    dist.barrier()


if __name__ == "__main__":
    faultjob.start(main)
