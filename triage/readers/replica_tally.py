"""One rank's triage.probe snapshot into its call's tallies: who holds which copy.

Ranks whose copies of a tensor must be identical share a replica key: every rank for a
plain or DDP replica (of one shape); for a DTensor, the ranks of one mesh and placements
at the same coordinate on every Shard or Partial dim (they differ only on Replicate
dims). A shard, FSDP1's flat shard or a placement that does not fit its mesh has no
replica to be compared with. Only checksums and norms are kept, with the ranks that
hold each: thousands of ranks stay small. `triage.readers.replica_comparison` compares.

Replicas write the same tensor list, and the reader hands every rank that wrote it the
same list (`SnapshotReader`): where such a shared list lands in a call's tallies is
worked out once, and each further rank holding it only joins those rank lists.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Literal

from triage.observations import MeshRecord, ProbeSnapshot, TensorRecord, TensorStats
from triage.readers.dtensor_placements import mesh_coordinate, parse_placement, placement_problem

FSDP1 = "FullyShardedDataParallel"

Part = Literal["value", "grad"]
Tally = dict[str, tuple[float | None, list[int]]]
MeshKey = tuple[tuple[int, ...], tuple[int, ...]]
Layout = tuple[tuple[str, ...], MeshKey]
PLAIN: Layout = ((), ((), ()))


@dataclass
class CallTally:
    """Tallies of one call across ranks: who holds which copy of every tensor."""

    label: str
    call: int
    tag: str | None
    time: float
    ranks: dict[int, str] = field(default_factory=dict)
    world_sizes: Counter[int] = field(default_factory=Counter)
    world_of: dict[int, int | None] = field(default_factory=dict)
    wrappers: dict[str, None] = field(default_factory=dict)
    kinds: dict[str, Literal["parameter", "buffer"]] = field(default_factory=dict)
    dtensors: set[str] = field(default_factory=set)
    values: dict[tuple[str, Hashable], Tally] = field(default_factory=dict)
    grads: dict[tuple[str, Hashable], Tally] = field(default_factory=dict)
    placements: dict[str, dict[Layout, list[int]]] = field(default_factory=dict)
    misfits: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    with_grad: dict[str, list[int]] = field(default_factory=dict)
    without_grad: dict[str, list[int]] = field(default_factory=dict)
    grad_ranks: set[int] = field(default_factory=set)
    stepped: bool | None = None
    nonfinite: dict[tuple[str, Part], dict[int, int]] = field(default_factory=dict)
    partial: dict[str, None] = field(default_factory=dict)
    meshes: dict[MeshKey, tuple[MeshRecord, list[int]]] = field(default_factory=dict)
    outside_mesh: dict[MeshKey, list[int]] = field(default_factory=dict)
    shared: dict[int, SharedTally] = field(default_factory=dict)


@dataclass
class SharedTally:
    """Where a tensor list that ranks share lands in one call's tallies: the rank lists a
    rank holding it joins, and its NaN/Inf counts. Valid for lists without placements on
    models FSDP1 does not wrap, whose keys do not depend on the rank."""

    tensors: list[TensorRecord]
    backward_ran: bool
    joins: list[list[int]]
    nonfinite: list[tuple[dict[int, int], int]]


def add_snapshot(
    group: CallTally, snapshot: ProbeSnapshot, path: str, shared: bool = False
) -> None:
    """Tally one ranked snapshot of the call: its copies, gradients, NaN/Inf, meshes.
    `shared`: its tensor list is one other snapshots share (see `SharedTally`)."""
    rank = snapshot.rank
    assert rank is not None
    group.ranks[rank] = path
    group.world_of[rank] = snapshot.world_size
    if snapshot.world_size is not None:
        group.world_sizes[snapshot.world_size] += 1
    for wrapper in snapshot.wrappers:
        group.wrappers[wrapper] = None
    for mesh in snapshot.meshes:
        key = (tuple(mesh.shape), tuple(mesh.ranks))
        group.meshes.setdefault(key, (mesh, []))[1].append(rank)
        if rank not in mesh.ranks:
            group.outside_mesh.setdefault(key, []).append(rank)
    stepped = _stepped(snapshot)
    if stepped is not None:
        group.stepped = stepped or bool(group.stepped)
    known = group.shared.get(id(snapshot.tensors)) if shared else None
    if known is not None and known.tensors is snapshot.tensors and FSDP1 not in snapshot.wrappers:
        if known.backward_ran:
            group.grad_ranks.add(rank)
        for ranks in known.joins:
            ranks.append(rank)
        for counts, count in known.nonfinite:
            counts[rank] = count
        return
    tally = _tally_tensors(group, snapshot, rank)
    rank_free = FSDP1 not in snapshot.wrappers and all(
        t.placements is None for t in snapshot.tensors
    )
    if shared and rank_free:
        group.shared[id(snapshot.tensors)] = tally


def _tally_tensors(group: CallTally, snapshot: ProbeSnapshot, rank: int) -> SharedTally:
    """Tally one rank's tensors, and where they landed."""
    trainable = [t for t in snapshot.tensors if t.kind == "parameter" and t.requires_grad]
    backward_ran = any(t.grad is not None for t in trainable)
    if backward_ran:
        group.grad_ranks.add(rank)
    landed = SharedTally(snapshot.tensors, backward_ran, [], [])
    for tensor in snapshot.tensors:
        name = tensor.name
        group.kinds.setdefault(name, tensor.kind)
        replicas = _replica_key(group, tensor, snapshot, rank)
        parts: tuple[tuple[Part, TensorStats | None], ...] = (
            ("value", tensor.value),
            ("grad", tensor.grad),
        )
        for part, stats in parts:
            if stats is not None and stats.nonfinite:
                counts = group.nonfinite.setdefault((name, part), {})
                counts[rank] = stats.nonfinite
                landed.nonfinite.append((counts, stats.nonfinite))
        if replicas is None:
            continue
        if tensor.value is not None:
            landed.joins.append(
                _add(group.values, (name, replicas), tensor.value.checksum, tensor.value.norm, rank)
            )
        if tensor.grad is not None:
            landed.joins.append(
                _add(group.grads, (name, replicas), tensor.grad.checksum, tensor.grad.norm, rank)
            )
        if backward_ran and tensor.kind == "parameter" and tensor.requires_grad:
            side = group.with_grad if tensor.grad is not None else group.without_grad
            ranks = side.setdefault(name, [])
            ranks.append(rank)
            landed.joins.append(ranks)
    return landed


def _stepped(snapshot: ProbeSnapshot) -> bool | None:
    """Whether the optimizer stepped before this snapshot, where its state tells: Adam and
    SGD with momentum create state at the first step; plain SGD never does."""
    record = snapshot.optimizer or {}
    state = record.get("state_tensors")
    if not isinstance(state, int):
        return None
    if state:
        return True
    groups = record.get("param_groups") or [{}]
    stateless = record.get("class") == "SGD" and all(
        isinstance(g, dict) and not g.get("momentum") for g in groups
    )
    return None if stateless else False


def _add(
    tallies: dict[tuple[str, Hashable], Tally],
    key: tuple[str, Hashable],
    checksum: str,
    norm: float | None,
    rank: int,
) -> list[int]:
    """Add `rank` to the holders of `checksum`; the list it joined."""
    tally = tallies.setdefault(key, {})
    held = tally.get(checksum)
    if held is None:
        held = tally[checksum] = (norm, [rank])
    else:
        held[1].append(rank)
    return held[1]


def _replica_key(
    group: CallTally, tensor: TensorRecord, snapshot: ProbeSnapshot, rank: int
) -> Hashable | None:
    """Ranks with equal keys must hold identical copies; None: not comparable (a misfit)."""
    local = tuple(tensor.local_shape if tensor.local_shape is not None else tensor.shape)
    if tensor.placements is None:
        if tensor.kind == "parameter" and FSDP1 in snapshot.wrappers:
            return ("flat shard", rank)  # FSDP1 keeps a flat shard per rank: never compared
        return ("plain", local)
    name = tensor.name
    group.dtensors.add(name)
    if tensor.mesh is None or not 0 <= tensor.mesh < len(snapshot.meshes):
        _misfit(group, name, f"placements {tensor.placements} without a mesh in the snapshot", rank)
        return None
    mesh = snapshot.meshes[tensor.mesh]
    mesh_key = (tuple(mesh.shape), tuple(mesh.ranks))
    group.placements.setdefault(name, {}).setdefault(
        (tuple(tensor.placements), mesh_key), []
    ).append(rank)
    coordinate = mesh_coordinate(mesh, rank)
    if coordinate is None:  # a mesh without this rank: a world issue (mesh_short), not placement
        return None
    parsed = [parse_placement(p) for p in tensor.placements]
    problem = placement_problem(tensor, mesh, parsed, coordinate)
    if problem:
        _misfit(group, name, problem, rank)
        return None
    kept = tuple(
        (dim, coordinate[dim]) for dim, p in enumerate(parsed) if p and p.kind != "replicate"
    )
    if any(p and p.kind == "partial" for p in parsed):
        group.partial[name] = None
    return ("dtensor", mesh_key, tuple(tensor.placements), kept, local)


def _misfit(group: CallTally, name: str, problem: str, rank: int) -> None:
    group.misfits.setdefault(name, {}).setdefault(problem, []).append(rank)
