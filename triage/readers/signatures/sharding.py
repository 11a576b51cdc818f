"""How tensors and checkpoints are laid over the ranks: torch's checks that a sharded
dimension divides by its mesh (or world) size, and that a checkpoint is loaded at the world
size it was saved at. Each is a parallel size that does not fit the data or the checkpoint."""

from __future__ import annotations

from triage.readers.signatures import signature

# DTensor's view ops and shape helpers, context parallel's sequence split, FSDP2's sharding
# of a parameter, the functional collectives' first-dimension split: a dimension that the
# ranks of its mesh dimension cannot share evenly.
signature(
    "setup.dim_not_divisible_by_mesh",
    r"dimension \d+ \(size (?P<size>\d+)\) is not evenly divisible by mesh dimension \d+"
    r" \(size (?P<mesh_size>\d+)\)"
    r"|Global dim (?P<global_size>\d+) not divisible by mesh size (?P<global_mesh>\d+)"
    r"|does not have first dimension divisible by world_size: (?P<world_size>\d+)"
    r"|FSDP does not support uneven sharding on dim \d+: (?P<fsdp_size>\d+)"
    r" \(world size: (?P<fsdp_world>\d+)\)"
    r"|is not divisible by CP mesh world size",
    anchors=(
        "divisible by mesh",
        "divisible by world_size:",
        "does not support uneven sharding on dim",
        "divisible by CP mesh world size",
    ),
    summary="a sharded tensor dimension does not divide evenly over its mesh dimension's ranks",
)

# ShardedTensor's (and its checkpoints') check of the process group it is loaded into.
signature(
    "setup.checkpoint_world_size",
    r"(?P<scope>Local|Global) world size at save time was (?P<saved>\d+), but at load time was"
    r" (?P<now>\d+)",
    anchors="world size at save time was",
    summary="a sharded checkpoint is loaded at another world size than it was saved at",
    extract=lambda m: {"dim": f"{m['scope'].lower()} world size"},
)
