# mypy: disable-error-code="no-untyped-call"
"""A plain data-parallel job launched on a master port that another process holds.

Planted fault (in the launch, not the script): ``torchrun --master-port P`` while a stale
process still listens on P. The launcher's rendezvous store cannot listen and the job dies
before any rank starts (comm.rendezvous). The script itself is correct.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
