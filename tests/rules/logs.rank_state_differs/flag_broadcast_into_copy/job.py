"""Two gloo ranks share a flag the way a known bug did: each rank decides it on its own
(only rank 0's check passes), and the broadcast meant to share rank 0's value writes into
a temporary copy, so every rank keeps its own."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
amp = torch.tensor([rank == 0])
dist.broadcast(amp.clone(), src=0)
print(f"rank {rank}: amp={bool(amp)}", flush=True)
dist.destroy_process_group()
