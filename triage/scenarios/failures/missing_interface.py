# mypy: disable-error-code="no-untyped-call"
"""A plain data-parallel job told to use a network interface this host does not have.

Planted fault (in the environment): ``GLOO_SOCKET_IFNAME`` names an interface copied from
another cluster's launch script (``ib0``); gloo cannot find its address and every rank fails
in ``init_process_group`` (comm.wrong_interface). The script itself is correct.
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
