# mypy: disable-error-code="no-untyped-call"
"""A process group created lazily, so only the ranks that reach the code path call new_group.

Planted fault: ranks 1..N-1 own the auxiliary head and sum its loss over an ``aux`` process
group that is created on first use. From step 3 on only the ranks with auxiliary labels take
that path, and the last rank's shard has none, so it never calls ``dist.new_group([1, 2,
3])``. With 4 ranks: ranks 1 and 2 wait inside new_group for rank 3, which (like rank 0,
not a member) waits in the gradient all_reduce (hang.subgroup_mismatch). Every member must
call new_group, in the same order. Needs a world size of at least 3.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

STEPS = 10
AUX_STEP = 3  # the auxiliary loss is switched on after a warm-up

_aux_group: dist.ProcessGroup | None = None


def aux_ranks(world: int) -> list[int]:
    return list(range(1, world))  # ranks that own the auxiliary head


def labelled_shards(world: int) -> set[int]:
    return set(range(world - 1))  # shards with auxiliary labels; the last one has none


def aux_group(world: int) -> dist.ProcessGroup:
    global _aux_group
    if _aux_group is None:
        # BUG: lazy creation; ranks that never take this path never call new_group.
        group = dist.new_group(aux_ranks(world))  # triage: fault
        assert isinstance(group, dist.ProcessGroup)
        _aux_group = group
    return _aux_group


def has_aux_targets(rank: int, world: int, step: int) -> bool:
    return rank in aux_ranks(world) and rank in labelled_shards(world) and step >= AUX_STEP


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
    gen = torch.Generator().manual_seed(1234 + rank)

    for step in range(STEPS):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 1, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        if step == AUX_STEP:
            print("TRIAGE-SCENARIO: armed", flush=True)
        if has_aux_targets(rank, world, step):
            aux = loss.detach().clone()
            dist.all_reduce(aux, group=aux_group(world))
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
