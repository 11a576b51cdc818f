"""Comparing the replicas of triage.probe snapshots across ranks, call by call.

At each call, the ranks that must hold identical copies are compared: every rank for a
plain or DDP replica; for a DTensor, the ranks at the same mesh coordinate on every Shard
or Partial dim, which differ only on Replicate dims (shards are never compared with each
other; FSDP1's flat shards neither). A majority vote names the outliers; with no majority
every rank is listed. Gradients are compared the same way: DDP and FSDP reduce them, so
replicas hold bit-identical gradients, and unreduced ones differ.

It also finds trainable parameters without a gradient on ranks that ran a backward,
NaN/Inf per rank, placements that differ across ranks or do not fit their mesh, meshes
that do not fit the world, and, across calls, when each tensor first differed.

Memory stays bounded with thousands of ranks: snapshots are added one at a time into
per-call tallies (who holds which checksum), and the checks keep counts, outlier ranks and
the first names only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from itertools import islice

from triage.observations import (
    Divergence,
    ProbeSnapshot,
    ReplicaCheck,
    TensorDivergence,
    WorldIssue,
)
from triage.readers.probe_snapshots import MAX_NAMES
from triage.readers.replica_tally import PLAIN, CallTally, Layout, Part, Tally, add_snapshot
from triage.text import format_ranks

MAX_PER_WHAT = 16
MAX_RANKS = 512
MAX_PATHS = 16


class ReplicaComparison:
    """The tallies of every call, fed one snapshot at a time, and the checks they give."""

    def __init__(self) -> None:
        self._groups: dict[str, CallTally] = {}

    def add(
        self,
        snapshot: ProbeSnapshot,
        path: str,
        label: str,
        call: int,
        tag: str | None,
        shared: bool = False,
    ) -> None:
        """Tally one rank's snapshot of the call named `label`; one without a rank has
        nothing to be compared with and is left out. `shared`: other snapshots share its
        tensor list (`SnapshotReader.shares`), whose tally is then worked out once."""
        if snapshot.rank is None:
            return
        group = self._groups.get(label)
        if group is None:
            group = self._groups[label] = CallTally(label, call, tag, snapshot.time)
        group.call, group.time = min(group.call, call), min(group.time, snapshot.time)
        add_snapshot(group, snapshot, path, shared)

    def checks(self) -> list[ReplicaCheck]:
        """One check per call, in call order."""
        ordered = sorted(self._groups.values(), key=lambda g: (g.call, g.time, g.label))
        return _checks(ordered)


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


def _checks(groups: list[CallTally]) -> list[ReplicaCheck]:
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


def _placement_verdicts(group: CallTally) -> list[_Verdict]:
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


def _presence_verdicts(group: CallTally) -> list[_Verdict]:
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


def _nonfinite_verdicts(group: CallTally) -> list[_Verdict]:
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
    group: CallTally,
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
    group: CallTally,
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


def _world_issues(group: CallTally, world: int | None) -> list[WorldIssue]:
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


def _uncovered(group: CallTally, world: int | None) -> list[WorldIssue]:
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
