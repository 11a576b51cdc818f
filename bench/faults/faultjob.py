# mypy: disable-error-code="no-untyped-call"
"""What every fault job shares, so that each script holds only its loop and its fault.

Knobs, all from the environment (bench/fault_matrix.py sets them):

- FAULT_CULPRIT: the rank that carries the fault (default 0).
- FAULT_TIMEOUT_S: the gloo timeout. Short in the benchmark, so that the ranks left
  waiting write their timeout errors for the logs way once the live ways are done.
- FAULT_LAUNCH=spawn: the script starts its own ranks with torch.multiprocessing.spawn
  (WORLD_SIZE of them); otherwise a launcher (separate processes or torchrun) started one
  process per rank with RANK and WORLD_SIZE set.

Every rank prints ARMED once, just before the step where the fault strikes: the
benchmark waits for the hang only after every rank printed it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from triage.scenarios import ARMED_LINE as ARMED

STEPS = 6
FAULT_STEP = 3

Main = Callable[[int, int], None]


def culprit() -> int:
    return int(os.environ.get("FAULT_CULPRIT", "0"))


def timeout() -> timedelta:
    return timedelta(seconds=float(os.environ.get("FAULT_TIMEOUT_S", "600")))


def arm(step: int) -> None:
    """Say, once, that this rank reached the step where the fault strikes."""
    if step == FAULT_STEP:
        print(ARMED, flush=True)


def model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    return net, torch.optim.SGD(net.parameters(), lr=0.01)


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 1, generator=gen)


def average_gradients(net: nn.Module, world: int) -> None:
    """The data-parallel step every fault script shares: one all_reduce per gradient."""
    for p in net.parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad)
        p.grad /= world


def start(main: Main) -> None:
    """Run `main(rank, world)` in a process group, under whichever launcher started us."""
    if os.environ.get("FAULT_LAUNCH") == "spawn":
        world = int(os.environ["WORLD_SIZE"])
        mp.spawn(_spawned, args=(main,), nprocs=world)
    else:
        _run(main)


def _spawned(index: int, main: Main) -> None:
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(index)
    _run(main)


def _run(main: Main) -> None:
    dist.init_process_group("gloo", timeout=timeout())
    main(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
