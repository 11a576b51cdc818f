"""Every node of a running Slurm job, collected in one `srun --overlap` step.

`triage collect` runs once per node inside the job's allocation (Slurm's own fan-out,
no daemon of ours) and the documents are merged as `read_collections` merges them: the
stack rules see every rank, rank groups name their nodes, and a node that sent nothing
is a gap whose ranks were not seen.
"""

from __future__ import annotations

from triage.collection.merging import merge
from triage.collection.slurm import collect_job
from triage.registry import ToolOutput, tool


@tool(name="collect_slurm_job")
def collect_slurm_job(
    slurm_job: str, deadline_s: float = 60.0, timeout_s: float = 10.0
) -> ToolOutput:
    """Collect every node of a running Slurm job (JOBID or JOBID.STEP): `srun --overlap`
    runs `triage collect` on each node at once, with a deadline per node; the stacks,
    environment and host facts of every rank come back with their node names, and a node
    whose collector failed or overran is a gap naming it."""
    fanout = collect_job(slurm_job, deadline_s, timeout_s)
    merged = merge(fanout.documents)
    gaps = fanout.gaps + merged.gaps
    notes = [f"Slurm job {slurm_job}: {len(fanout.nodes)} nodes asked", *merged.notes]
    text = "\n".join(notes + [f"{g.source}: {g.reason}" for g in gaps])
    return ToolOutput(evidence=merged.evidence, gaps=gaps, notes=notes, text=text)
