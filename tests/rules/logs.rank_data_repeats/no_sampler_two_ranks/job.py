"""Two gloo ranks read one dataset through a shuffling DataLoader seeded alike and no
DistributedSampler (the bug), and print the indices of their first batches."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

dist.init_process_group("gloo")
rank = dist.get_rank()
loader = DataLoader(
    list(range(64)), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0)
)
for step, batch in zip(range(2), loader, strict=False):
    print(f"rank {rank}: step {step} indices: {batch.tolist()}", flush=True)
dist.destroy_process_group()
