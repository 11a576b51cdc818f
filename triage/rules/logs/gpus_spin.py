"""hang.unknown from logs, as a guess: nvidia-smi shows every GPU busy, and nothing failed."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids, shows_failure, signals

#: Utilisation nvidia-smi shows for a GPU whose kernel never finishes.
BUSY = 95


@rule("logs.gpus_spin", "hang.unknown", without_failure=True)
def gpus_spin(evidence: EvidenceSet) -> Iterator[Finding]:
    """Every GPU nvidia-smi lists is at full utilisation with memory held, and no failure.

    What it detects:
    An nvidia-smi table in which every GPU reads 95-100% GPU-Util with memory in use, in text
    that shows no failure anywhere.

    Why it happens:
    An NCCL collective runs as a GPU kernel that polls until every rank's part arrives: a
    job whose ranks wait in a collective one rank never joins shows every GPU at 100%
    while nothing progresses. A job that trains normally reads the same, so the table alone
    only says where to look if the job has stopped printing.

    Evidence:
    The table's GPU lines with their utilisation.

    Fix:
    If the job prints nothing more, take stacks of every rank while it hangs (`triage hang
    --pids ...`, or py-spy dump) to see which rank is not in the collective, and rerun with
    NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL.

    Known false positives:
    A healthy job under load. Every other rule's finding outranks this one, and a symptom
    the user names (`triage oom`) sets it aside.

    References:
    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
    """
    if shows_failure(evidence):
        return
    rows = [(e, s) for e, s in signals(evidence, "smi.gpu_memory") if "util" in s.fields]
    if not rows or any(s.fields["util"] < BUSY or s.fields["used"] == 0 for _, s in rows):
        return
    gpus = f"all {len(rows)} GPUs" if len(rows) > 1 else "the GPU"
    yield Finding(
        title=f"nvidia-smi shows {gpus} at full utilisation with nothing failed: ranks may"
        " spin in a collective",
        summary=f"nvidia-smi shows {gpus} at {min(s.fields['util'] for _, s in rows)}% or more"
        " with memory held, and no line reports a failure. A job whose ranks wait in an NCCL"
        " collective one rank never joins looks exactly like this (NCCL's kernels poll at"
        " 100%); so does a healthy job under load.",
        ranks=[],
        confidence=0.15,
        evidence=ids(rows[:8]),
        fix="If the job prints nothing more, take stacks of every rank while it hangs (`triage"
        " hang --pids ...`, or py-spy dump): the rank outside the collective is the culprit;"
        " rerun with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL if they do not show it.",
        confirm="the job's log stopped while the GPUs stay at 100%",
    )
