"""Evidence from triage.probe snapshots: do the ranks hold the model they should?

`triage.probe.snapshot(model, optimizer, tag=...)` writes one JSON file per rank and call
with a checksum, sum, norm and NaN/Inf count of every parameter, gradient and buffer
(the local shard of a DTensor), its placements and mesh, the wrappers around the model
and the stacks. This tool reads those files, groups them by call (the tag when the ranks
tag their calls, else the call index) and compares, at each call, the ranks that must
hold identical copies: every rank for a plain or DDP replica; for a DTensor, the ranks at
the same mesh coordinate on every Shard or Partial dim, which differ only on Replicate
dims (shards are never compared with each other). A majority vote names the outliers;
with no majority every rank is listed. Gradients are compared the same way: DDP and FSDP
reduce them, so replicas hold bit-identical gradients, and unreduced ones differ.

It also reports trainable parameters without a gradient on ranks that ran a backward,
NaN/Inf per rank, placements that differ across ranks or do not fit their mesh, meshes
that do not fit the world, and, across calls, when each tensor first differed.

Memory stays bounded with thousands of ranks: files are read one at a time into per-call
tallies (who holds which checksum), and the evidence keeps counts, outlier ranks and the
first names only.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from triage.models import Evidence, Gap
from triage.observations import (
    Divergence,
    Frame,
    MeshRecord,
    ProbeSnapshot,
    ReplicaCheck,
    SnapshotSummary,
    TensorDivergence,
    TensorRecord,
    WorldIssue,
    is_probe_snapshot,
)
from triage.readers.files import files_by_head
from triage.readers.stacks import classify, is_user_code, stack_evidence
from triage.registry import ToolError, ToolOutput, tool
from triage.text import format_ranks

MAX_BYTES = 512 << 20
MAX_FILES = 100_000
HEAD = 8192
MAX_NAMES = 8
MAX_PER_WHAT = 16
MAX_RANKS = 512
MAX_SUMMARIES = 256
MAX_FILE_GAPS = 20
MAX_PATHS = 16
MAX_MESH_RANKS = 256
CAPTURE_HINT = (
    "call triage.probe.snapshot(model, optimizer, tag=f'step {step}') on every rank at the "
    "same point of the loop, and pass the folder with every rank's files"
)

_PLACEMENT = re.compile(
    r"^\s*(?:(?P<strided>_StridedShard|_S)\(\s*(?:dim=)?(?P<sdim>-?\d+)\s*,[^)]*\)"
    r"|(?P<shard>Shard|S)\(\s*(?:dim=)?(?P<dim>-?\d+)\s*\)"
    r"|(?P<replicate>Replicate\(\s*\)|R)"
    r"|(?P<partial>Partial|P)(?:\([^)]*\))?)\s*$"
)
_MAIN_THREAD = "MainThread"
FSDP1 = "FullyShardedDataParallel"

Part = Literal["value", "grad"]
Tally = dict[str, tuple[float | None, list[int]]]
MeshKey = tuple[tuple[int, ...], tuple[int, ...]]
Layout = tuple[tuple[str, ...], MeshKey]
PLAIN: Layout = ((), ((), ()))


class _Head(BaseModel):
    """The few fields that decide how snapshots group, read before the tensors."""

    model_config = ConfigDict(extra="ignore")

    rank: int | None = None
    pid: int = 0
    call: int = 0
    tag: str | None = None
    time: float = 0.0


class _Unusable(Exception):
    """A file that cannot be read as a snapshot: it becomes a gap."""


@dataclass
class _Placement:
    kind: str  # shard, strided, replicate, partial
    dim: int | None = None


@dataclass
class _Group:
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


@tool(name="read_probe_snapshots")
def read_probe_snapshots(snapshot_files: list[str]) -> ToolOutput:
    """Read triage.probe snapshot files (one JSON per rank and call; folders are searched)
    and compare the ranks at each call: parameters, gradients and buffers that differ among
    ranks that must hold the same copy (all replicas of DDP or a plain model; DTensors only
    across Replicate mesh dims, never across shards), with the outlier ranks by majority
    vote and the first call at which each differed; trainable parameters with no gradient
    on some ranks; NaN/Inf per rank; placements that differ across ranks or do not fit the
    mesh; meshes that do not fit the world size."""
    paths, gaps = _files(snapshot_files)
    if not paths:
        raise ToolError("no probe snapshot files to read", CAPTURE_HINT)
    heads = _heads(paths, gaps)
    if not heads:
        return ToolOutput(gaps=_bounded(gaps), text=f"none of {len(paths)} snapshots could be read")
    chosen = _choose(heads, gaps)
    by_tag = _tags_align(chosen)
    groups: dict[tuple[str, int | str], _Group] = {}
    summaries: list[SnapshotSummary] = []
    stacks: list[Evidence] = []
    for path, head in chosen:
        try:
            snapshot = _load(path)
        except _Unusable as exc:
            gaps.append(
                Gap(source=path, reason=str(exc), hint=CAPTURE_HINT, tool="read_probe_snapshots")
            )
            continue
        label = str(head.tag) if by_tag else f"call {head.call}"
        summaries.append(_summary(snapshot, path, label))
        if snapshot.reason == "signal":
            stacks.extend(_signal_stack(snapshot, path))
        if snapshot.rank is None:
            continue  # nothing to compare it with: a gap says so
        key = ("tag", str(head.tag)) if by_tag else ("call", head.call)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(label, head.call, head.tag, snapshot.time)
        group.call, group.time = min(group.call, head.call), min(group.time, snapshot.time)
        _tally(group, snapshot, path)
    ordered = sorted(groups.values(), key=lambda g: (g.call, g.time, g.label))
    checks = _checks(ordered)
    gaps += _coverage_gaps(checks, summaries)
    evidence = _check_evidence(checks) + _summary_evidence(summaries, checks) + stacks
    return ToolOutput(evidence=evidence, gaps=_bounded(gaps), text=_text(checks, summaries))


# --- files -------------------------------------------------------------------------------


def _files(given: list[str]) -> tuple[list[str], list[Gap]]:
    """The files given, and the snapshot files under the folders given."""
    files: list[str] = []
    gaps: list[Gap] = []
    for raw in given:
        path = Path(raw)
        if path.is_dir():
            files += files_by_head(path, is_probe_snapshot, HEAD, MAX_FILES)
        elif path.is_file():
            files.append(raw)
        else:
            why = "not a regular file" if path.exists() else "no such file or directory"
            gaps.append(Gap(source=raw, reason=why, tool="read_probe_snapshots"))
    return list(dict.fromkeys(files))[:MAX_FILES], gaps


def _read(path: str) -> bytes:
    try:
        size = Path(path).stat().st_size
        if size > MAX_BYTES:
            raise _Unusable(f"over the {MAX_BYTES}-byte limit for snapshots: not read")
        return Path(path).read_bytes()
    except OSError as exc:
        raise _Unusable(f"cannot read: {exc.strerror or exc}") from None


def _invalid(exc: ValidationError) -> _Unusable:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    reason = error["msg"] + (f" at {where}" if where else "")
    return _Unusable(f"not a valid triage.probe/1 snapshot: {reason}"[:300])


def _heads(paths: list[str], gaps: list[Gap]) -> list[tuple[str, _Head]]:
    heads = []
    for path in paths:
        try:
            heads.append((path, _Head.model_validate_json(_read(path))))
        except ValidationError as exc:
            gaps.append(_file_gap(path, str(_invalid(exc))))
        except _Unusable as exc:
            gaps.append(_file_gap(path, str(exc)))
    return heads


def _load(path: str) -> ProbeSnapshot:
    try:
        return ProbeSnapshot.model_validate_json(_read(path))
    except ValidationError as exc:
        raise _invalid(exc) from None


def _file_gap(path: str, reason: str) -> Gap:
    return Gap(source=path, reason=reason, hint=CAPTURE_HINT, tool="read_probe_snapshots")


def _choose(heads: list[tuple[str, _Head]], gaps: list[Gap]) -> list[tuple[str, _Head]]:
    """One process per rank: when a rank restarted (torchrun restarts, a rerun into the same
    folder), the latest process is the one that showed the problem; the others are gaps."""
    latest: dict[int | None, tuple[float, int]] = {}
    for _, head in heads:
        if head.rank is None:
            continue
        mark = (head.time, head.pid)
        if head.rank not in latest or mark > latest[head.rank]:
            latest[head.rank] = mark
    newest_pid = {rank: pid for rank, (_, pid) in latest.items()}
    chosen, dropped = [], []
    for path, head in heads:
        if head.rank is not None and head.pid != newest_pid[head.rank]:
            dropped.append(path)
        else:
            chosen.append((path, head))
    if dropped:
        more = f" and {len(dropped) - 1} more" if len(dropped) > 1 else ""
        gaps.append(
            Gap(
                source=dropped[0] + more,
                reason="snapshots of an earlier process of the same rank (a restart or an "
                "older run): only each rank's latest process was compared",
                tool="read_probe_snapshots",
            )
        )
    unranked = [path for path, head in chosen if head.rank is None]
    if unranked:
        more = f" and {len(unranked) - 1} more" if len(unranked) > 1 else ""
        gaps.append(
            Gap(
                source=unranked[0] + more,
                reason="snapshot without a rank (torch.distributed not initialised): not compared",
                tool="read_probe_snapshots",
            )
        )
    return chosen


def _tags_align(heads: list[tuple[str, _Head]]) -> bool:
    """Group by tag when every snapshot has one and no rank used a tag twice: tags survive
    ranks that snapshot a different number of times (a conditional extra call)."""
    seen: set[tuple[int | None, str]] = set()
    for _, head in heads:
        if head.tag is None or (head.rank, head.tag) in seen:
            return False
        seen.add((head.rank, head.tag))
    return True


# --- one snapshot into its call's tallies ------------------------------------------------


def _tally(group: _Group, snapshot: ProbeSnapshot, path: str) -> None:
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
    trainable = [t for t in snapshot.tensors if t.kind == "parameter" and t.requires_grad]
    backward_ran = any(t.grad is not None for t in trainable)
    if backward_ran:
        group.grad_ranks.add(rank)
    stepped = _stepped(snapshot)
    if stepped is not None:
        group.stepped = stepped or bool(group.stepped)
    for tensor in snapshot.tensors:
        name = tensor.name
        group.kinds.setdefault(name, tensor.kind)
        replicas = _replica_key(group, tensor, snapshot, rank)
        if tensor.value is not None and tensor.value.nonfinite:
            group.nonfinite.setdefault((name, "value"), {})[rank] = tensor.value.nonfinite
        if tensor.grad is not None and tensor.grad.nonfinite:
            group.nonfinite.setdefault((name, "grad"), {})[rank] = tensor.grad.nonfinite
        if replicas is None:
            continue
        if tensor.value is not None:
            _add(group.values, (name, replicas), tensor.value.checksum, tensor.value.norm, rank)
        if tensor.grad is not None:
            _add(group.grads, (name, replicas), tensor.grad.checksum, tensor.grad.norm, rank)
        if backward_ran and tensor.kind == "parameter" and tensor.requires_grad:
            side = group.with_grad if tensor.grad is not None else group.without_grad
            side.setdefault(name, []).append(rank)


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
) -> None:
    tally = tallies.setdefault(key, {})
    held = tally.get(checksum)
    if held is None:
        tally[checksum] = (norm, [rank])
    else:
        held[1].append(rank)


def _replica_key(
    group: _Group, tensor: TensorRecord, snapshot: ProbeSnapshot, rank: int
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
    coordinate = _coordinate(mesh, rank)
    if coordinate is None:  # a mesh without this rank: a world issue (mesh_short), not placement
        return None
    parsed = [_parse_placement(p) for p in tensor.placements]
    problem = _placement_problem(tensor, mesh, parsed, coordinate)
    if problem:
        _misfit(group, name, problem, rank)
        return None
    kept = tuple(
        (dim, coordinate[dim]) for dim, p in enumerate(parsed) if p and p.kind != "replicate"
    )
    if any(p and p.kind == "partial" for p in parsed):
        group.partial[name] = None
    return ("dtensor", mesh_key, tuple(tensor.placements), kept, local)


def _misfit(group: _Group, name: str, problem: str, rank: int) -> None:
    group.misfits.setdefault(name, {}).setdefault(problem, []).append(rank)


def _parse_placement(text: str) -> _Placement | None:
    match = _PLACEMENT.match(text)
    if match is None:
        return None
    if match["strided"]:
        return _Placement("strided", int(match["sdim"]))
    if match["shard"]:
        return _Placement("shard", int(match["dim"]))
    return _Placement("replicate" if match["replicate"] else "partial")


def _coordinate(mesh: MeshRecord, rank: int) -> tuple[int, ...] | None:
    try:
        index = mesh.ranks.index(rank)
    except ValueError:
        return None
    coordinate = []
    for size in reversed(mesh.shape):
        coordinate.append(index % size if size else 0)
        index = index // size if size else 0
    return tuple(reversed(coordinate))


def _placement_problem(
    tensor: TensorRecord,
    mesh: MeshRecord,
    parsed: list[_Placement | None],
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
        expected[dim] = _shard_size(expected[dim], mesh.shape[mesh_dim], coordinate[mesh_dim])
    if list(tensor.local_shape) != expected:
        return (
            f"local shape {tensor.local_shape} does not fit {placements} of global shape "
            f"{tensor.shape} on mesh {mesh.shape} (expected {expected} at coordinate "
            f"{list(coordinate)})"
        )
    return None


def _shard_size(size: int, chunks: int, index: int) -> int:
    """torch.chunk's split, which Shard uses: ceil-sized chunks, the last ones short or empty."""
    if chunks <= 0:
        return size
    full = -(-size // chunks)
    start = full * index
    return max(0, min(size, start + full) - start)


# --- one snapshot as a summary -----------------------------------------------------------


def _summary(snapshot: ProbeSnapshot, path: str, label: str) -> SnapshotSummary:
    trainable = [t for t in snapshot.tensors if t.kind == "parameter" and t.requires_grad]
    with_grad = [t for t in trainable if t.grad is not None]
    without = [t.name for t in trainable if t.grad is None] if with_grad else []
    nonfinite = [
        f"{t.name} ({part})"
        for t in snapshot.tensors
        for part, stats in (("value", t.value), ("grad", t.grad))
        if stats is not None and stats.nonfinite
    ]
    optimizer = snapshot.optimizer or {}
    return SnapshotSummary(
        path=path,
        rank=snapshot.rank,
        world_size=snapshot.world_size,
        call=snapshot.call,
        tag=snapshot.tag,
        label=label,
        reason=snapshot.reason,
        host=snapshot.host,
        pid=snapshot.pid,
        backend=snapshot.backend,
        model=snapshot.model,
        wrappers=snapshot.wrappers,
        meshes=snapshot.meshes
        if sum(len(m.ranks) for m in snapshot.meshes) <= MAX_MESH_RANKS
        else [],
        parameters=sum(1 for t in snapshot.tensors if t.kind == "parameter"),
        buffers=sum(1 for t in snapshot.tensors if t.kind == "buffer"),
        grads=len(with_grad),
        optimizer=str(optimizer["class"]) if "class" in optimizer else None,
        optimizer_state=_int(optimizer.get("state_tensors")),
        without_grad=without[:MAX_NAMES],
        without_grad_total=len(without),
        nonfinite=nonfinite[:MAX_NAMES],
        nonfinite_total=len(nonfinite),
        user_frame=_user_frame(snapshot),
        flight_recorder=snapshot.flight_recorder,
        errors=snapshot.errors[:MAX_NAMES],
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _user_frame(snapshot: ProbeSnapshot) -> Frame | None:
    """The innermost user frame of the main thread (the probe leaves its own frames out):
    the line of the training loop that called snapshot(), or where it was on a signal."""
    if not snapshot.stacks:
        return None
    main = next((s for s in snapshot.stacks if s.thread == _MAIN_THREAD), snapshot.stacks[0])
    return next((f for f in main.frames if is_user_code(f.file)), None)


def _signal_stack(snapshot: ProbeSnapshot, path: str) -> list[Evidence]:
    """A snapshot taken on the signal holds the main thread where it is blocked: the same
    `stack` evidence py-spy gives, for hosts where py-spy may not attach (no ptrace). A live
    py-spy stack of the same rank still wins (see triage.grouping.latest_stacks)."""
    main = next((s for s in snapshot.stacks if s.thread == _MAIN_THREAD), None)
    if main is None or not main.frames:
        return []
    state = classify(main.frames, pid=snapshot.pid, rank=snapshot.rank, host=snapshot.host)
    state.thread = main.thread
    return [stack_evidence(state, path, "triage.probe, on the signal", f":probe{snapshot.call}")]


# --- comparing the ranks of each call ----------------------------------------------------


@dataclass
class _Verdict:
    """One tensor's disagreement in one way, merged over its replica groups."""

    name: str
    what: Divergence
    outliers: set[int] = field(default_factory=set)
    agreeing: set[int] = field(default_factory=set)
    majority: bool = True
    diff: float | None = None
    part: Part | None = None
    detail: str = ""


def _checks(groups: list[_Group]) -> list[ReplicaCheck]:
    first_seen: dict[tuple[str, str], str] = {}
    last_match: dict[tuple[str, str], str] = {}
    checks = []
    for index, group in enumerate(groups):
        verdicts: list[_Verdict] = []
        compared: set[str] = set()
        sides: list[tuple[Part, dict[tuple[str, Hashable], Tally]]] = [
            ("value", group.values),
            ("grad", group.grads),
        ]
        for what, tallies in sides:
            found, seen = _compare(tallies, what)
            verdicts += found
            compared |= seen
            diverged = {v.name for v in found}
            for name in seen - diverged:
                last_match[(name, what)] = group.label
        verdicts += _placement_verdicts(group)
        verdicts += _presence_verdicts(group)
        verdicts += _nonfinite_verdicts(group)
        checks.append(_check(group, verdicts, compared, first_seen, last_match, index == 0))
        for verdict in verdicts:
            first_seen.setdefault((verdict.name, verdict.what), group.label)
    return checks


def _compare(
    tallies: dict[tuple[str, Hashable], Tally], what: Divergence
) -> tuple[list[_Verdict], set[str]]:
    """Tensors whose replicas disagree, and every tensor that had replicas to compare."""
    merged: dict[str, _Verdict] = {}
    compared: set[str] = set()
    for (name, _), tally in tallies.items():
        holders = sum(len(ranks) for _, ranks in tally.values())
        if holders < 2:
            continue  # a shard, or a tensor only one rank holds: nothing to compare
        compared.add(name)
        if len(tally) == 1:
            continue
        verdict = merged.setdefault(name, _Verdict(name, what))
        outliers, agreeing, majority, diff = _vote(tally)
        verdict.outliers |= set(outliers)
        verdict.agreeing |= set(agreeing)
        verdict.majority = verdict.majority and majority
        if diff is not None:
            verdict.diff = max(diff, verdict.diff or 0.0)
    for verdict in merged.values():
        verdict.agreeing -= verdict.outliers
    return list(merged.values()), compared


def _vote(tally: Tally) -> tuple[list[int], list[int], bool, float | None]:
    """Outliers by majority; with no majority (2 ranks, a tie, all distinct) every rank."""
    copies = sorted(tally.values(), key=lambda c: -len(c[1]))
    total = sum(len(ranks) for _, ranks in copies)
    top_norm, top_ranks = copies[0]
    if len(top_ranks) * 2 > total:
        diffs = [_relative(norm, top_norm) for norm, _ in copies[1:]]
        known = [d for d in diffs if d is not None]
        outliers = [r for _, ranks in copies[1:] for r in ranks]
        return outliers, top_ranks, True, max(known) if known else None
    norms = [n for n, _ in copies if n is not None and math.isfinite(n)]
    spread = _relative(max(norms), min(norms)) if len(norms) > 1 else None
    return [r for _, ranks in copies for r in ranks], [], False, spread


def _relative(norm: float | None, reference: float | None) -> float | None:
    if norm is None or reference is None or not (math.isfinite(norm) and math.isfinite(reference)):
        return None
    scale = max(abs(reference), abs(norm))
    return abs(norm - reference) / scale if scale else 0.0


def _placement_verdicts(group: _Group) -> list[_Verdict]:
    verdicts = []
    # A plain tensor where other ranks hold a DTensor; ranks in no mesh at all are left to
    # the mesh_short world issue (the mesh, not the plan, leaves them out).
    covered = {r for mesh, _ in group.meshes.values() for r in mesh.ranks}
    plain: dict[str, list[int]] = {}
    for (name, key), copies in group.values.items():
        if name in group.placements and isinstance(key, tuple) and key[0] == "plain":
            held = (r for _, ranks in copies.values() for r in ranks if r in covered)
            plain.setdefault(name, []).extend(held)
    for name, placed in group.placements.items():
        layouts = dict(placed)
        if plain.get(name):  # a DTensor on some ranks, a plain tensor on others
            layouts[PLAIN] = plain[name]
        if len(layouts) > 1:
            tally: Tally = {repr(layout): (None, ranks) for layout, ranks in layouts.items()}
            outliers, agreeing, majority, _ = _vote(tally)
            if not majority and PLAIN in layouts:  # a tie: the ranks that lost the DTensor
                outliers = layouts[PLAIN]
                agreeing = [
                    r for layout, ranks in layouts.items() if layout != PLAIN for r in ranks
                ]
                majority = True
            shown = "; ".join(
                f"{_layout(layout)} on rank {format_ranks(ranks)}"
                for layout, ranks in list(layouts.items())[:4]
            )
            detail = f"placements differ across ranks: {shown}"
            verdicts.append(
                _Verdict(name, "placements", set(outliers), set(agreeing), majority, detail=detail)
            )
        holders = {rank for ranks in layouts.values() for rank in ranks}
        for problem, ranks in group.misfits.get(name, {}).items():
            verdicts.append(
                _Verdict(name, "placements", set(ranks), holders - set(ranks), detail=problem)
            )
    for name, problems in group.misfits.items():
        if name not in group.placements:  # no mesh at all: nothing else to compare it with
            for problem, ranks in problems.items():
                verdicts.append(_Verdict(name, "placements", set(ranks), detail=problem))
    return verdicts


def _layout(layout: Layout) -> str:
    placements, (shape, ranks) = layout
    if layout == PLAIN:
        return "a plain tensor (no placements)"
    return f"{list(placements)} on mesh {list(shape)} of ranks {format_ranks(list(ranks))}"


def _presence_verdicts(group: _Group) -> list[_Verdict]:
    verdicts = []
    for name, missing in group.without_grad.items():
        having = group.with_grad.get(name, [])
        detail = (
            "no gradient on any rank that ran a backward"
            if not having
            else f"a gradient on rank {format_ranks(having)}, none on rank {format_ranks(missing)}"
        )
        verdicts.append(
            _Verdict(name, "grad_presence", set(missing), set(having), bool(having), detail=detail)
        )
    return verdicts


def _nonfinite_verdicts(group: _Group) -> list[_Verdict]:
    verdicts = []
    for (name, part), counts in group.nonfinite.items():
        clean = set(group.ranks) - set(counts)
        worst = max(counts.items(), key=lambda item: item[1])
        most = f" (most on rank {worst[0]}: {worst[1]})" if len(set(counts.values())) > 1 else ""
        detail = (
            f"{sum(counts.values())} NaN/Inf elements in the {part} on rank "
            f"{format_ranks(list(counts))}{most}"
        )
        verdicts.append(
            _Verdict(
                name,
                "nonfinite",
                set(counts),
                clean,
                len(clean) > len(counts),
                part=part,
                detail=detail,
            )
        )
    return verdicts


def _check(
    group: _Group,
    verdicts: list[_Verdict],
    compared: set[str],
    first_seen: dict[tuple[str, str], str],
    last_match: dict[tuple[str, str], str],
    first: bool,
) -> ReplicaCheck:
    nonfinite = {(v.name, v.part) for v in verdicts if v.what == "nonfinite"}
    counts: Counter[str] = Counter(v.what for v in verdicts)
    kept: list[TensorDivergence] = []
    per_what: Counter[str] = Counter()
    order = {name: i for i, name in enumerate(group.kinds)}
    for verdict in sorted(verdicts, key=lambda v: order.get(v.name, len(order))):
        if per_what[verdict.what] >= MAX_PER_WHAT:
            continue
        per_what[verdict.what] += 1
        kept.append(_divergence(group, verdict, nonfinite, first_seen, last_match))
    world = group.world_sizes.most_common(1)[0][0] if group.world_sizes else None
    ranks = sorted(group.ranks)
    held = set(ranks)
    missing = list(islice((r for r in range(world or 0) if r not in held), MAX_RANKS))
    notes = []
    shapes = Counter(
        name for name, key in group.values if isinstance(key, tuple) and key[0] == "plain"
    )
    reshaped = [name for name, n in shapes.items() if n > 1]
    if reshaped:
        notes.append(
            f"{len(reshaped)} tensors have different shapes on different ranks and were "
            f"compared only among ranks of one shape: {', '.join(reshaped[:MAX_NAMES])}"
        )
    if any(not v.majority for v in verdicts if v.what in ("value", "grad")):
        notes.append("no majority for some tensors: every rank holding them is listed")
    return ReplicaCheck(
        call=group.call,
        tag=group.tag,
        label=group.label,
        ranks=ranks,
        world_size=world,
        missing=missing,
        wrappers=list(group.wrappers),
        compared=len(compared),
        diverging=kept,
        diverging_total=len(verdicts),
        counts=dict(counts),
        ranks_with_grads=len(group.grad_ranks),
        stepped=group.stepped,
        partial=list(group.partial)[:MAX_NAMES],
        world_issues=_world_issues(group, world),
        first_call=first,
        notes=notes,
        paths=[group.ranks[r] for r in ranks[:MAX_PATHS]],
    )


def _divergence(
    group: _Group,
    verdict: _Verdict,
    nonfinite: set[tuple[str, Part | None]],
    first_seen: dict[tuple[str, str], str],
    last_match: dict[tuple[str, str], str],
) -> TensorDivergence:
    outliers, agreeing = sorted(verdict.outliers), sorted(verdict.agreeing)
    compared_part = verdict.what if verdict.what in ("value", "grad") else None
    key = (verdict.name, verdict.what)
    return TensorDivergence(
        name=verdict.name,
        kind=group.kinds.get(verdict.name, "parameter"),
        what=verdict.what,
        part=verdict.part,
        ranks=outliers[:MAX_RANKS],
        ranks_total=len(outliers),
        agreeing=agreeing[:MAX_RANKS],
        agreeing_total=len(agreeing),
        majority=verdict.majority,
        dtensor=verdict.name in group.dtensors,
        max_relative_diff=round(verdict.diff, 6) if verdict.diff is not None else None,
        nonfinite=compared_part is not None and (verdict.name, compared_part) in nonfinite,
        since=first_seen.get(key, group.label),
        matched_at=last_match.get(key) if compared_part else None,
        detail=verdict.detail,
    )


def _world_issues(group: _Group, world: int | None) -> list[WorldIssue]:
    issues = []
    if len(group.world_sizes) > 1:
        usual = group.world_sizes.most_common(1)[0][0]
        odd = sorted(r for r, w in group.world_of.items() if w is not None and w != usual)
        sizes = ", ".join(f"{w} on {n} ranks" for w, n in group.world_sizes.most_common())
        issues.append(
            WorldIssue(
                problem="world_size_differs",
                detail=f"the ranks report world sizes {sizes}",
                ranks=odd[:MAX_RANKS],
            )
        )
    if world:
        outside = sorted(r for r in group.ranks if r >= world)
        if outside:
            issues.append(
                WorldIssue(
                    problem="rank_outside",
                    detail=f"rank {format_ranks(outside)} is not below the world size {world}",
                    ranks=outside[:MAX_RANKS],
                )
            )
    for key, (mesh, holders) in group.meshes.items():
        size = math.prod(mesh.shape)
        name = f"mesh {mesh.shape}" + (f" ({', '.join(mesh.dim_names)})" if mesh.dim_names else "")
        if world and size > world:
            issues.append(
                WorldIssue(
                    problem="mesh_too_big",
                    detail=f"{name} holds {size} ranks but the world has {world}",
                    mesh=mesh,
                    ranks=sorted(holders)[:MAX_RANKS],
                )
            )
        elif world and any(not 0 <= r < world for r in mesh.ranks):
            bad = [r for r in mesh.ranks if not 0 <= r < world]
            issues.append(
                WorldIssue(
                    problem="mesh_ranks_outside",
                    detail=f"{name} names rank {format_ranks(bad)}, outside the world of {world}",
                    mesh=mesh,
                    ranks=sorted(holders)[:MAX_RANKS],
                )
            )
        elif key in group.outside_mesh:
            outside = sorted(group.outside_mesh[key])
            issues.append(
                WorldIssue(
                    problem="mesh_short",
                    detail=f"{name} holds ranks {format_ranks(mesh.ranks)} of a world of "
                    f"{world or '?'}: rank {format_ranks(outside)} uses it without a place in it",
                    mesh=mesh,
                    ranks=outside[:MAX_RANKS],
                )
            )
    if group.meshes and not any(i.problem == "mesh_short" for i in issues):
        issues += _uncovered(group, world)
    return issues


def _uncovered(group: _Group, world: int | None) -> list[WorldIssue]:
    """Ranks in no mesh at all while others are: the mesh covers part of the world (a
    2-rank mesh in a 4-rank job); stage meshes of pipeline parallelism cover every rank."""
    covered = {r for mesh, _ in group.meshes.values() for r in mesh.ranks}
    outside = sorted(set(group.ranks) - covered)
    if not outside:
        return []
    mesh = max((m for m, _ in group.meshes.values()), key=lambda m: math.prod(m.shape))
    name = f"mesh {mesh.shape}" + (f" ({', '.join(mesh.dim_names)})" if mesh.dim_names else "")
    detail = (
        f"{name} holds ranks {format_ranks(mesh.ranks)} of a world of {world or '?'}: rank "
        f"{format_ranks(outside)} is in no mesh"
    )
    return [WorldIssue(problem="mesh_short", detail=detail, mesh=mesh, ranks=outside[:MAX_RANKS])]


# --- evidence ----------------------------------------------------------------------------


def _check_evidence(checks: list[ReplicaCheck]) -> list[Evidence]:
    items = []
    for check in checks:
        items.append(
            Evidence(
                id=f"replica:{check.label}",
                kind=ReplicaCheck.EVIDENCE_KIND,
                source=_source(check.paths),
                summary=_describe(check),
                data=check.model_dump(exclude_defaults=True),
            )
        )
    return items


def _summary_evidence(
    summaries: list[SnapshotSummary], checks: list[ReplicaCheck]
) -> list[Evidence]:
    """Every file's summary for jobs of a few hundred files; beyond that, the files of the
    ranks the checks name, and the lowest rank of each call, so thousands stay small."""
    if len(summaries) > MAX_SUMMARIES:
        named = {(c.label, r) for c in checks for d in c.diverging for r in d.ranks[:MAX_NAMES]}
        named |= {(c.label, c.ranks[0]) for c in checks if c.ranks}
        summaries = [s for s in summaries if (s.label, s.rank) in named or s.rank is None][
            :MAX_SUMMARIES
        ]
    ids: Counter[str] = Counter()
    items = []
    for summary in summaries:
        who = f"rank{summary.rank}" if summary.rank is not None else f"pid{summary.pid}"
        base = f"probe:{who}:{summary.label}"
        ids[base] += 1
        at = f" at {summary.user_frame.location()}" if summary.user_frame else ""
        wrapped = f", in {'/'.join(summary.wrappers)}" if summary.wrappers else ""
        items.append(
            Evidence(
                id=base if ids[base] == 1 else f"{base}#{ids[base]}",
                kind=SnapshotSummary.EVIDENCE_KIND,
                source=summary.path,
                rank=summary.rank,
                summary=f"{who.replace('rank', 'rank ')} {summary.label}: {summary.parameters} "
                f"parameters ({summary.grads} with grad), {summary.buffers} buffers{wrapped}{at}",
                data=summary.model_dump(exclude_defaults=True),
            )
        )
    return items


def _describe(check: ReplicaCheck) -> str:
    head = f"{check.label}: {len(check.ranks)} ranks, {check.compared} tensors compared"
    if not check.diverging_total:
        return head + ", all replicas identical"
    parts = []
    for what, count in sorted(check.counts.items()):
        shown = [d for d in check.diverging if d.what == what][:3]
        names = ", ".join(f"{d.name} (rank {format_ranks(d.ranks)})" for d in shown)
        more = f" +{count - len(shown)} more" if count > len(shown) else ""
        parts.append(f"{what} {count}: {names}{more}")
    return head + "; differ: " + "; ".join(parts)


def _source(paths: list[str]) -> str:
    folders = {str(Path(p).parent) for p in paths}
    return folders.pop() if len(folders) == 1 else f"{len(paths)} snapshot files"


def _coverage_gaps(checks: list[ReplicaCheck], summaries: list[SnapshotSummary]) -> list[Gap]:
    gaps = []
    for check in checks:
        if check.missing:
            gaps.append(
                Gap(
                    source=f"probe snapshots, {check.label}",
                    reason=f"no snapshot from rank {format_ranks(check.missing)} of "
                    f"{check.world_size}: hung, exited, or its file was not collected",
                    hint=CAPTURE_HINT,
                    tool="read_probe_snapshots",
                )
            )
    if len(checks) == 1 and len(checks[0].ranks) == 1:
        gaps.append(
            Gap(
                source=summaries[0].path if summaries else "probe snapshots",
                reason="snapshots of one rank only: nothing to compare it with",
                hint=CAPTURE_HINT,
                tool="read_probe_snapshots",
            )
        )
    return gaps[:5]


def _bounded(gaps: list[Gap]) -> list[Gap]:
    if len(gaps) <= MAX_FILE_GAPS:
        return gaps
    rest = gaps[MAX_FILE_GAPS:]
    reasons = Counter(gap.reason for gap in rest)
    summary = Gap(
        source=f"{len(rest)} more files",
        reason="; ".join(f"{n} x {r}" for r, n in reasons.most_common(3))[:500],
        tool="read_probe_snapshots",
    )
    return gaps[:MAX_FILE_GAPS] + [summary]


def _text(checks: Iterable[ReplicaCheck], summaries: list[SnapshotSummary]) -> str:
    lines = [f"{len(summaries)} probe snapshots"]
    lines += [_describe(check) for check in checks]
    return "\n".join(lines[:20])
