"""DTensor placements in triage.probe snapshots: parsing them and checking them against
their mesh and shapes.

A snapshot records each DTensor's placements as text (`Shard(dim=0)`, `Replicate()`,
`Partial(sum)`, `_StridedShard(...)`, or the short `S(0)`, `R`, `P`), its mesh and its
local and global shapes. Which mesh coordinate a rank holds, and the local shape a Shard
gives it there (torch.chunk's split), tell whether its placements can be right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from triage.observations import MeshRecord, TensorRecord

_PLACEMENT = re.compile(
    r"^\s*(?:(?P<strided>_StridedShard|_S)\(\s*(?:dim=)?(?P<sdim>-?\d+)\s*,[^)]*\)"
    r"|(?P<shard>Shard|S)\(\s*(?:dim=)?(?P<dim>-?\d+)\s*\)"
    r"|(?P<replicate>Replicate\(\s*\)|R)"
    r"|(?P<partial>Partial|P)(?:\([^)]*\))?)\s*$"
)


@dataclass
class Placement:
    kind: str  # shard, strided, replicate, partial
    dim: int | None = None


def parse_placement(text: str) -> Placement | None:
    """One placement's text as a Placement; None when it is no placement torch knows."""
    match = _PLACEMENT.match(text)
    if match is None:
        return None
    if match["strided"]:
        return Placement("strided", int(match["sdim"]))
    if match["shard"]:
        return Placement("shard", int(match["dim"]))
    return Placement("replicate" if match["replicate"] else "partial")


def mesh_coordinate(mesh: MeshRecord, rank: int) -> tuple[int, ...] | None:
    """Where `rank` sits in `mesh`, one index per mesh dim; None when it is not in it."""
    try:
        index = mesh.ranks.index(rank)
    except ValueError:
        return None
    coordinate = []
    for size in reversed(mesh.shape):
        coordinate.append(index % size if size else 0)
        index = index // size if size else 0
    return tuple(reversed(coordinate))


def placement_problem(
    tensor: TensorRecord,
    mesh: MeshRecord,
    parsed: list[Placement | None],
    coordinate: tuple[int, ...],
) -> str | None:
    """Why this rank's placements cannot be right for its mesh and shapes, if they cannot."""
    placements = tensor.placements or []
    if len(placements) != len(mesh.shape):
        return (
            f"{len(placements)} placements {placements} on a {len(mesh.shape)}-D mesh "
            f"{mesh.shape}: one placement per mesh dim"
        )
    unknown = [p for p, parsed_p in zip(placements, parsed, strict=True) if parsed_p is None]
    if unknown:
        return f"unknown placement {unknown[0]!r}"
    ndim = len(tensor.shape)
    for text, placement in zip(placements, parsed, strict=True):
        if placement and placement.dim is not None and not -ndim <= placement.dim < ndim:
            return f"{text} of a {ndim}-D tensor {tensor.shape}: no such dim"
    if any(p and p.kind == "strided" for p in parsed) or tensor.local_shape is None:
        return None
    expected = list(tensor.shape)
    for mesh_dim, placement in enumerate(parsed):
        if placement is None or placement.kind != "shard" or placement.dim is None:
            continue
        dim = placement.dim % ndim
        expected[dim] = shard_size(expected[dim], mesh.shape[mesh_dim], coordinate[mesh_dim])
    if list(tensor.local_shape) != expected:
        return (
            f"local shape {tensor.local_shape} does not fit {placements} of global shape "
            f"{tensor.shape} on mesh {mesh.shape} (expected {expected} at coordinate "
            f"{list(coordinate)})"
        )
    return None


def shard_size(size: int, chunks: int, index: int) -> int:
    """torch.chunk's split, which Shard uses: ceil-sized chunks, the last ones short or empty."""
    if chunks <= 0:
        return size
    full = -(-size // chunks)
    start = full * index
    return max(0, min(size, start + full) - start)
