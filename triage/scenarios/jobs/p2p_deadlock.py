# mypy: disable-error-code="no-untyped-call"
"""Pairs of ranks exchange boundary activations with blocking send/recv, both receiving first.

Planted fault: rank pairs (0, 1), (2, 3), ... swap a halo row, and each rank posts its
blocking ``recv`` before its ``send``, so both wait for a message the other has not sent yet
(hang.p2p_deadlock). The fix is to order the calls by rank parity or use
``batch_isend_irecv``. Needs an even world size (default 2).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

STEPS = 10
EXCHANGE_STEP = 2


def exchange_halo(rank: int, edge: torch.Tensor) -> torch.Tensor:
    halo = torch.empty_like(edge)
    peer = rank ^ 1  # 0 <-> 1, 2 <-> 3, ...
    if rank % 2 == 0:
        dist.recv(halo, src=peer)  # triage: fault
        dist.send(edge, dst=peer)
    else:
        dist.recv(halo, src=peer)  # triage: wait
        dist.send(edge, dst=peer)
    return halo


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    if dist.get_world_size() % 2:
        raise SystemExit("p2p_deadlock needs an even world size")
    torch.manual_seed(0)
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1234 + rank)

    for step in range(STEPS):
        x = torch.randn(8, 16, generator=gen)
        out = model(x)
        if step == EXCHANGE_STEP:
            print("TRIAGE-SCENARIO: armed", flush=True)
            # BUG: the halo exchange was only written for this step and never tested.
            out = out + exchange_halo(rank, out.detach()[-1:].clone())
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
