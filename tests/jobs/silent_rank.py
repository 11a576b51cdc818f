# mypy: disable-error-code="no-untyped-call"
"""One rank stops short of a collective and says nothing; its peers time out in it.

Planted fault: at step 3 the last rank blocks on a pipe nobody writes (a stand-in for a
stuck data read) instead of joining the loss all_reduce. The other ranks' gloo timers fire
in that all_reduce and they exit with the timeout; the last rank's own log ends at its step
line with no error (hang.rank_not_in_collective). Read with `triage analyze` on the logs
alone, the silent rank is the one named, not a rank that reported the timeout.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

STEPS = 6


def main() -> None:
    timeout = float(os.environ.get("SILENT_RANK_TIMEOUT_S", "5"))
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(STEPS):
        print(f"rank {rank} step {step}", flush=True)
        if rank == world - 1 and step == 3:
            read_end, _ = os.pipe()
            os.read(read_end, 1)  # triage: fault
        x = torch.ones(4) * step
        dist.all_reduce(x)  # triage: wait
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
