# mypy: disable-error-code="no-untyped-call"
"""A checkpoint collective run only by the ranks whose own loss improved.

Planted fault: each rank decides from its local loss whether to save a checkpoint, and
saving gathers every rank's step with all_gather_object. At step 2 only ranks 0 and 3
improve: they wait in the checkpoint's collective while ranks 1 and 2 wait in the next
step's gradient all_reduce, both inside the training loop (hang.mismatched_collective,
under a data-dependent `if`; not uneven inputs).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


def save_checkpoint(model: nn.Module, step: int) -> None:
    steps: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(steps, step)  # triage: fault
    torch.save(model.state_dict(), "/dev/null")


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    best = float("inf")
    for step in range(6):
        print("TRIAGE-SCENARIO: armed", flush=True)
        # every rank's loss falls for two steps; at step 2 only ranks 0 and 3 improve
        loss = torch.tensor(10.0 - step if step < 2 or rank in (0, 3) else 10.0)
        model.weight.grad = torch.ones_like(model.weight) * loss
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)  # triage: wait
        if loss.item() < best:  # triage: branch
            best = loss.item()
            save_checkpoint(model, step)  # triage: call
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
