# mypy: disable-error-code="no-untyped-call"
"""A training loop that hangs: one rank skips a metrics all_reduce the others enter.

Planted fault: the loss is averaged across ranks for logging only on ranks that log
(`rank != 1`); the skipping rank goes on to the end-of-epoch barrier. Rank 1 waits in
barrier, every other rank in all_reduce, forever (hang.mismatched_collective). The script
calls `triage.probe.install(model, opt)`: on SIGUSR1 each rank writes a snapshot (reason
"signal") from the probe's thread while its main thread stays blocked.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import triage.probe as probe


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.install(model, opt)
    x = torch.randn(16, 8)
    loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("TRIAGE-SCENARIO: armed", flush=True)
    if rank != 1:
        dist.all_reduce(loss.detach())  # triage: fault
    dist.barrier()  # triage: wait
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
