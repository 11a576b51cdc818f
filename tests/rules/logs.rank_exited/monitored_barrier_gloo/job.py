"""The job record.py runs: three gloo ranks (torchrun, TORCH_DISTRIBUTED_DEBUG=DETAIL); rank 1
raises after the first all_reduce while ranks 0 and 2 enter the second one."""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    grad = torch.ones(4)
    dist.all_reduce(grad)
    if rank == 1:
        raise ValueError("rank 1: corrupt sample in batch 1")
    dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
