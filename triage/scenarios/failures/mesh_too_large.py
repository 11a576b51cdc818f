# mypy: disable-error-code="no-untyped-call"
"""A device mesh sized for 4 ranks, launched with 2.

Planted fault: the tensor-parallel degree is hard-coded to 4 while the job runs with
``--nproc-per-node 2``; ``init_device_mesh`` refuses a mesh bigger than the world on every
rank (config.world_size_mismatch).
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

TP_DEGREE = 4  # BUG (planted): should come from the world size


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    # triage: fault (next line)
    mesh = init_device_mesh("cpu", (TP_DEGREE,), mesh_dim_names=("tp",))
    print(f"rank {dist.get_rank()}: mesh {mesh}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
