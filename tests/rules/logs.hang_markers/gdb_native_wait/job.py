"""Two gloo ranks: rank 1 sleeps instead of joining the all_reduce rank 0 waits in."""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
if dist.get_rank() == 1:
    time.sleep(120)
print("rank", dist.get_rank(), "enters all_reduce", flush=True)
dist.all_reduce(torch.ones(4))
