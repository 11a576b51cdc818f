"""Every node's `triage collect` document, merged into one job's evidence.

A job spans nodes; each node's collector (run by whatever fan-out the cluster has:
kubectl exec, pdsh, srun) wrote the same evidence `triage hang` gathers on one host.
Merged, the stack rules see every rank, and rank groups name their nodes. A document
that cannot be read, or comes from another triage version, is a gap naming the file;
ranks no document holds are "not seen".
"""

from __future__ import annotations

from triage.collection.document import read_collections as read_documents
from triage.collection.merging import merge
from triage.registry import ToolOutput, collector_paused, tool


@tool(name="read_collections")
@collector_paused()  # one pause for reading and merging 512 nodes' items, not one each
def read_collections(collections: list[str]) -> ToolOutput:
    """Read `triage collect` documents (files, folders of *.json/*.jsonl, one document per
    node) and merge them: every node's rank processes, stacks, environment and logs as one
    job's evidence, with node names; unreadable documents and unseen ranks become gaps."""
    documents, gaps = read_documents(collections)
    merged = merge(documents)
    text = "\n".join(merged.notes + [f"{g.source}: {g.reason}" for g in gaps + merged.gaps])
    return ToolOutput(
        evidence=merged.evidence, gaps=gaps + merged.gaps, notes=merged.notes, text=text
    )
