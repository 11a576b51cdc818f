# mypy: disable-error-code="no-untyped-call"
"""A collective skipped once under a rank- and step-dependent condition, then training on.

Planted fault: at step 3 rank 2 skips the loss all_reduce and carries on, so it runs out
of collectives one call early and waits in the final barrier while ranks 0 and 1 wait in
the all_reduce inside the loop. The stacks look like uneven inputs (one rank after the
loop), but every rank ran the same number of steps: the `if` around the all_reduce is the
fault (hang.mismatched_collective).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

import triage.probe  # noqa: F401  (on triage run's signal: a Flight Recorder dump)

STEPS = 6


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    for step in range(STEPS):
        x = torch.ones(4) * step
        if step == STEPS - 1:
            print("TRIAGE-SCENARIO: armed", flush=True)
        if not (rank == 2 and step == 3):  # triage: branch
            dist.all_reduce(x)  # triage: wait
    dist.barrier()  # triage: fault
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
