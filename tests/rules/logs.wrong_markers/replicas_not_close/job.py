"""Two gloo ranks build the same layer with their own seed (the bug), then check that
their replicas agree: torch.testing reports the mismatch on every rank."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
layer = torch.nn.Linear(4, 4)
weights = [torch.empty_like(layer.weight) for _ in range(dist.get_world_size())]
dist.all_gather(weights, layer.weight.detach())
try:
    torch.testing.assert_close(weights[0], weights[1])
finally:
    dist.destroy_process_group()
