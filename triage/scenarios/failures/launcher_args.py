# mypy: disable-error-code="no-untyped-call"
"""An older training script launched with the deprecated ``torch.distributed.launch``.

Planted fault: the script declares ``--local_rank`` (underscore), as scripts written for
torch < 2.0 do; ``torch.distributed.launch`` now passes ``--local-rank=N`` (hyphen), so
argparse rejects it on every rank before training starts (config.launcher_args). The fix
is to read ``LOCAL_RANK`` from the environment or accept both spellings.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="toy data-parallel job")
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    t = torch.ones(4) * args.local_rank
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
