"""Two gloo ranks log each step at INFO; at step 3 rank 1 blocks reading a pipe nobody
writes (the fault) while rank 0 waits in the step's all_reduce: the logs stop there."""

import logging
import os

import torch
import torch.distributed as dist

logging.basicConfig(format="%(asctime)s %(levelname)s rank%(rank)s %(message)s", level="INFO")
dist.init_process_group("gloo")
rank = dist.get_rank()
log = logging.LoggerAdapter(logging.getLogger("train"), {"rank": rank})
for step in range(1000):
    log.info("step %d: forward and backward", step)
    if rank == 1 and step == 3:
        reader, _ = os.pipe()
        os.read(reader, 1)
    dist.all_reduce(torch.ones(4))
