"""Two CPU gloo ranks: after one all_reduce, rank 1 dereferences a null pointer (a native
crash, as a broken extension would make) while rank 0 waits in the next all_reduce."""

import ctypes
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
dist.all_reduce(torch.ones(4))
if rank == 1:
    ctypes.string_at(0)
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
