"""Every node's collection as one evidence set: the rules then see the whole job.

A merge keeps each item as the node's collector made it, with three changes: stacks and
processes carry their node's name (rank groups show it), an id another node used
already gets `@node`, and gaps say which nodes they are from (one gap for all of them).
Ranks that WORLD_SIZE expects and no collection holds were not seen: their node did not
answer, or was not asked. They are a gap, never "exited": nothing here says their
process is gone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from triage.collection.document import Sourced
from triage.models import Evidence, Gap
from triage.observations import RankProcess, RankState
from triage.registry import collector_paused
from triage.text import format_nodes, format_ranks

_NODE_KINDS = (RankProcess.EVIDENCE_KIND, RankState.EVIDENCE_KIND)


@dataclass
class Merged:
    """The evidence of every collection, with what could not be seen across the job."""

    evidence: list[Evidence] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@collector_paused()
def merge(documents: list[Sourced]) -> Merged:
    merged = Merged()
    ids: set[str] = set()
    holders: dict[int, set[str]] = {}
    gaps: dict[tuple[str, str, str | None, str | None], list[str]] = {}
    for _, doc in documents:
        for item in doc.evidence:
            merged.evidence.append(_on_node(item, doc.node, ids))
            if item.kind in _NODE_KINDS and item.rank is not None:
                holders.setdefault(item.rank, set()).add(doc.node)
        for gap in doc.gaps:
            gaps.setdefault((gap.source, gap.reason, gap.hint, gap.tool), []).append(doc.node)
        merged.notes += [f"{doc.node}: {note}" for note in doc.notes]
    merged.gaps = [  # the same gap on 512 nodes is one line naming them
        Gap(source=f"{format_nodes(nodes)} {source}", reason=reason, hint=hint, tool=tool)
        for (source, reason, hint, tool), nodes in gaps.items()
    ]
    nodes = sorted({doc.node for _, doc in documents})
    if documents:
        merged.notes.insert(
            0,
            f"merged {len(documents)} collections from {format_nodes(nodes)}:"
            f" ranks {format_ranks(list(holders))}",
        )
    twice = sorted(rank for rank, where in holders.items() if len(where) > 1)
    if twice:
        merged.notes.append(
            f"ranks {format_ranks(twice)} are in the collections of more than one node"
            " (collected twice, or nodes sharing a host); each is counted once"
        )
    unseen = _not_seen(merged.evidence, set(holders))
    if unseen:
        merged.gaps.append(unseen)
    return merged


def _on_node(item: Evidence, node: str, ids: set[str]) -> Evidence:
    """The item as one node's: its id unique across nodes, its rank's node named."""
    update: dict[str, object] = {}
    if item.id in ids:
        update["id"] = f"{item.id}@{node}"
    if item.kind in _NODE_KINDS:
        update["data"] = {**item.data, "node": node}
    ids.add(str(update.get("id", item.id)))
    return item.model_copy(update=update) if update else item


def _not_seen(evidence: list[Evidence], seen: set[int]) -> Gap | None:
    """The ranks of the world (the largest WORLD_SIZE a rank reports) in no collection."""
    worlds = [
        int(item.data["world_size"])
        for item in evidence
        if item.kind == RankProcess.EVIDENCE_KIND and item.data.get("world_size")
    ]
    absent = sorted(set(range(max(worlds, default=0))) - seen)
    if not absent:
        return None
    return Gap(
        source="job",
        reason=f"ranks {format_ranks(absent)} of WORLD_SIZE {max(worlds)} are in no collection:"
        " not seen (their node's collection failed or is missing), not known to have exited",
        hint="run `triage collect` on the nodes that hold them and add their documents",
        tool="read_collections",
    )
