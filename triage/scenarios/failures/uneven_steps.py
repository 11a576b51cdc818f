# mypy: disable-error-code="no-untyped-call"
"""Data-parallel training on uneven shards, with a short collective timeout.

Planted fault: the last rank's shard holds fewer samples, so it runs one step fewer and
waits in the final barrier (the culprit: with 3 ranks, rank 2) while the others wait in the
next step's gradient all_reduce. With a 5 s process-group timeout gloo gives up instead of
hanging: the last rank fails first with ``Timed out waiting 5000ms`` in the barrier, and the
others with the same timeout or ``Connection closed by peer`` in the all_reduce
(hang.uneven_inputs, seen from logs as a collective timeout at different call sites).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

BATCH = 8
SHARD_SIZE = 48


def load_shard(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    # The dataset is stored as one file per rank; the last file holds the remainder.
    n = SHARD_SIZE if rank < world - 1 else SHARD_SIZE - 3
    gen = torch.Generator().manual_seed(42 + rank)
    x = torch.randn(n, 16, generator=gen)
    return x, x.sum(dim=1, keepdim=True)


def average_gradients(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data_x, data_y = load_shard(rank, world)

    # BUG (planted): the number of steps comes from the local shard; ranks disagree on it.
    n_batches = len(data_x) // BATCH
    print(f"rank {rank}: {len(data_x)} samples, {n_batches} batches", flush=True)
    for step in range(n_batches):
        x, y = data_x[step * BATCH : (step + 1) * BATCH], data_y[step * BATCH : (step + 1) * BATCH]
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)

    print(f"rank {rank}: training done, waiting for the others", flush=True)
    # triage: fault (next line)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
