"""hang.mismatched_collective from logs: the ranks of a tensor-parallel group print different inputs."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._rank_prints import WHERE_AND_WHEN, Printed, printed, without_rank

#: What differs per rank by design even in a tensor-parallel group: where it runs, its
#: memory and its timing.
_PER_RANK = re.compile(rf"(?i){WHERE_AND_WHEN}|util|throughput|speed|latency|tps|token/s|\bs\b")


@rule("logs.tp_ranks_diverge", "hang.mismatched_collective")
def tp_ranks_diverge(evidence: EvidenceSet) -> Iterator[Finding]:
    """The ranks of a tensor-parallel group print different inputs at the same point.

    What it detects:
    Lines labelled with a tensor-parallel rank (`TP0: batch_size()=24, first_req=86e5...`,
    `TP2: batch_size()=25, first_req=f224...`; an inference engine's `[... TP3]` log prefix)
    whose values of one name differ across the group. Values that differ only by the rank's
    own number, and names that differ per rank by design (device, host, memory, timing), are
    not compared.

    Why it happens:
    The ranks of a tensor-parallel group run every layer's collectives together, so they must
    run the same batch: an inference engine's schedulers that decided different batches (a
    request seen by some ranks first, a rank-local cache or random choice, a rank that fell
    behind), or training ranks of one TP group fed different data, issue collectives of
    different sizes or counts, and the group hangs or computes garbage.

    Evidence:
    The prints of the name on each TP rank.

    Fix:
    Decide the batch once per tensor-parallel group and share it: broadcast the scheduler's
    decision (or the batch) from TP rank 0 to the group, keep every input to the decision
    identical across the group, and give the ranks of one TP group the same data-parallel
    rank for their data loader.

    Known false positives:
    A value that legitimately differs per rank under a name the list above does not know.

    References:
    https://docs.nvidia.com/nemo-framework/user-guide/latest/nemotoolkit/features/parallelisms.html
    """
    for entry in printed(evidence, tensor_parallel=True):
        if _differs(entry):
            yield _finding(entry)
            return


def _differs(entry: Printed) -> bool:
    if not entry.key or _PER_RANK.search(entry.key):
        return False
    return len({without_rank(value, rank) for rank, value in entry.values.items()}) > 1


def _finding(entry: Printed) -> Finding:
    shown = ", ".join(f"TP{r}: {entry.key}={v}" for r, v in sorted(entry.values.items()))
    return Finding(
        title=f"the tensor-parallel ranks disagree on `{entry.key}`",
        summary=f"The ranks of one tensor-parallel group print different values of `{entry.key}`"
        f" ({shown[:200]}): they run every layer's collectives together on the same batch, so"
        " ranks with different inputs issue collectives of different sizes or counts and the"
        " group hangs.",
        ranks=[],
        confidence=0.45,
        evidence=[item.id for item, _ in entry.lines.values()][:8],
        fix="Decide the batch once per tensor-parallel group and share it: broadcast the"
        " scheduler's decision (or the batch) from TP rank 0, keep every input to that decision"
        " identical across the group, and give the ranks of one TP group the same data-parallel"
        " rank for their data loader.",
        confirm=f"`{entry.key}` printed on every TP rank at the same step: one value rules this"
        " out",
    )
