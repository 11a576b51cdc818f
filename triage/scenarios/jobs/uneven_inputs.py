# mypy: disable-error-code="no-untyped-call"
"""Data-parallel training on uneven shards: one rank runs out of batches first.

Planted fault: each rank reads its own pre-sharded file and the last shard holds only the
remainder (61 samples instead of 64), so the last rank gets 7 batches and the others 8; there
is no padding (DistributedSampler) and no ``Join`` context. With 4 ranks, rank 3 leaves the
training loop and waits in the final barrier; ranks 0..2 wait in the next step's gradient
all_reduce (hang.uneven_inputs).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

BATCH = 8


SHARD_SIZE = 64


def load_shard(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    # The dataset is stored as one file per rank; the last file holds the remainder.
    n = SHARD_SIZE if rank < world - 1 else SHARD_SIZE - 3
    gen = torch.Generator().manual_seed(42 + rank)
    return torch.randn(n, 16, generator=gen), torch.randn(n, 1, generator=gen)


def average_gradients(model: nn.Module) -> None:
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)  # triage: wait
            p.grad /= world


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data_x, data_y = load_shard(rank, world)

    # BUG: the number of steps comes from the local shard; ranks disagree on it.
    n_batches = len(data_x) // BATCH
    print(f"rank {rank}: {len(data_x)} samples, {n_batches} batches", flush=True)
    for step in range(n_batches):
        if step == n_batches - 1:
            print("TRIAGE-SCENARIO: armed", flush=True)
        x, y = data_x[step * BATCH : (step + 1) * BATCH], data_y[step * BATCH : (step + 1) * BATCH]
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()

    print(f"rank {rank}: training done, waiting for the others", flush=True)
    dist.barrier()  # triage: fault
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
