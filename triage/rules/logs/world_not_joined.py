"""config.world_size_mismatch from logs: processes that report no place in the world."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, ids, signals


@rule("logs.world_not_joined", "config.world_size_mismatch")
def world_not_joined(evidence: EvidenceSet) -> Iterator[Finding]:
    """Processes report a rank or world size that says they never joined one world.

    What it detects:
    A process's own report of its rank and world size (`hello from rank -1, world size -1`,
    `rank: 0, world_size: 1`) with a negative rank or a world below one; or two or more
    processes (distinct pids, hosts or logs) each reporting rank 0 in a world of one.

    Why it happens:
    torch.distributed gives -1 for the rank and world size of a group the process is not a
    member of, or before its default group exists: the launcher's ranks never reached the
    process group (an MPI build or backend that did not take them, a regression in how the
    default group is made). Every process alone in a world of one is a job started once per
    process without a launcher (python train.py on every node, an mpirun of a program built
    without MPI): the processes never meet.

    Evidence:
    The processes' own rank and world size lines.

    Fix:
    Start the job through a launcher that gives each process its RANK and WORLD_SIZE
    (torchrun, srun, mpirun with an MPI-enabled build), check that init_process_group gets
    them (print dist.get_rank() and dist.get_world_size() right after it), and rebuild
    programs that must use MPI with MPI enabled.

    Known false positives:
    A job that is meant to run as one process prints rank 0 of 1 once: one writer alone is
    no finding.

    References:
    https://pytorch.org/docs/stable/distributed.html#torch.distributed.get_rank
    """
    found = signals(evidence, "printed.rank_of_world")
    unset = [item for item in found if _unset(item)]
    alone = [item for item in found if _alone(item)]
    # one writer per log, host, process and launcher rank (MPI's `[1,3]<stdout>:` prefix)
    writers = {(s.path, s.host, s.pid, s.rank) for _, s in alone}
    if unset:
        yield Finding(
            title="processes report rank -1 of world -1: they are in no process group",
            summary=f"`{unset[0][1].text.strip()[:120]}`: torch.distributed gives -1 to a process"
            " outside the group it asks about, so the launcher's ranks never reached the process"
            " group.",
            ranks=[],
            confidence=0.5,
            evidence=ids(unset)[:6],
            fix=_FIX,
            confirm="dist.get_rank() and dist.get_world_size() printed right after"
            " init_process_group show -1 or 1 on every process",
        )
    elif len(writers) >= 2:
        yield Finding(
            title=f"{len(writers)} processes each report rank 0 of a world of 1",
            summary=f"{len(writers)} processes each report rank 0 in a world of one: each started"
            " a job of its own, and they never meet.",
            ranks=[],
            confidence=0.45,
            evidence=ids(alone)[:6],
            fix=_FIX,
            confirm="the launch gives each process its own RANK and one WORLD_SIZE",
        )


_FIX = (
    "Start the job through a launcher that gives each process its RANK and WORLD_SIZE (torchrun,"
    " srun, mpirun with an MPI-enabled build), check that init_process_group gets them (print"
    " dist.get_rank() and dist.get_world_size() right after it), and rebuild programs that must"
    " use MPI with MPI enabled."
)


def _unset(item: Signal) -> bool:
    return int(item[1].fields["rank_seen"]) < 0 or int(item[1].fields["world"]) < 1


def _alone(item: Signal) -> bool:
    return int(item[1].fields["rank_seen"]) == 0 and int(item[1].fields["world"]) == 1
