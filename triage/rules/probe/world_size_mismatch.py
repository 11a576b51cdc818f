"""config.world_size_mismatch from probe snapshots: a DeviceMesh that does not fit the world,
or ranks that disagree on the world size."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.probe._replica_view import named, probe_view
from triage.text import rank_label

#: problem -> (confidence, what it does to the job)
_KINDS = {
    "mesh_too_big": (0.9, "Collectives on it wait for ranks that do not exist."),
    "mesh_ranks_outside": (0.9, "Collectives on it wait for ranks that do not exist."),
    "world_size_differs": (0.85, "The ranks size their groups and data shards differently."),
    "rank_outside": (0.85, "A rank number at or past the world size joins no group correctly."),
    "mesh_short": (
        0.75,
        "init_device_mesh accepts a mesh smaller than the world; the ranks outside it get "
        "no mesh coordinate, hold no shard and take no part in its collectives.",
    ),
}
_FIX = (
    "Size the mesh from the world: init_device_mesh(device, (dp, tp)) with dp x tp == "
    "dist.get_world_size() (derive dp = world_size // tp), launch nnodes x nproc-per-node "
    "processes to match, and give every process the same WORLD_SIZE and a distinct RANK."
)


@rule("probe.world_size_mismatch", "config.world_size_mismatch")
def world_size_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """The DeviceMesh or the ranks disagree with the world size the snapshots report.

    What it detects:
    A mesh with more ranks than the world, or naming ranks outside it; a rank that uses a
    mesh it has no place in (the mesh covers only part of the world, e.g. a 2-rank mesh
    in a 4-rank job); ranks reporting different world sizes; a rank not below the world
    size.

    Why it happens:
    The mesh shape comes from a config (tp=2, dp=1) while the launcher starts another
    number of processes; init_device_mesh accepts a mesh smaller than the world, and the
    ranks outside it hold no coordinate, so they compute on empty shards or skip the
    collectives their peers run. Two launches or a hand-written launch script give ranks
    different WORLD_SIZE values.

    Evidence:
    The meshes (shape, dim names, ranks) and world sizes in each rank's snapshot
    (read_probe_snapshots); the snapshot's user line.

    Fix:
    Derive the mesh shape from dist.get_world_size(); launch as many processes as the mesh
    holds; one WORLD_SIZE for all ranks.

    Known false positives:
    Pipeline stages that each build a mesh of their own ranks are fine (every rank is in
    its mesh) and are not reported.

    References:
    torch.distributed.device_mesh.init_device_mesh; torchrun --nnodes/--nproc-per-node.
    """
    view = probe_view(evidence)
    for item, check in view.checks:
        if not check.world_issues:
            continue
        issue = max(check.world_issues, key=lambda i: _KINDS[i.problem][0])
        confidence, effect = _KINDS[issue.problem]
        ranks = issue.ranks or check.ranks
        others = [i.detail for i in check.world_issues if i is not issue][:2]
        also = f" Also: {'; '.join(others)}." if others else ""
        yield Finding(
            title=f"the mesh does not fit the world: {issue.detail}",
            summary=f"At {named(check.label)}, {issue.detail}. {effect}{also}",
            ranks=ranks,
            location=view.location(check, ranks),
            confidence=confidence,
            evidence=view.cite(item, check, ranks),
            fix=_FIX,
            confirm=f"dist.get_world_size() on {rank_label(ranks)} differs from the "
            "number of ranks in the mesh it uses",
        )
        return
