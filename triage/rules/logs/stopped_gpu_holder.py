"""oom.other_process from nvidia-smi's table and `ps`: a stopped process holds the GPU."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids, signals
from triage.rules.logs.smi_shared_gpu import holds_memory
from triage.rules.memory.other_process import CONFIRM, FIX


@rule("logs.stopped_gpu_holder", "oom.other_process")
def stopped_gpu_holder(evidence: EvidenceSet) -> Iterator[Finding]:
    """A process that nvidia-smi shows holding GPU memory is stopped or a zombie in `ps`.

    What it detects:
    nvidia-smi's process row (GPU, pid, memory) and a `ps aux` row of the same pid in state
    T (stopped: Ctrl-Z, a debugger, SIGSTOP) or Z (a zombie whose parent never reaped it).

    Why it happens:
    A stopped process keeps its CUDA context and every allocation until it is continued or
    killed; a run suspended with Ctrl-Z, or left behind by a user or an earlier job outside
    the scheduler's control, holds the GPU while new jobs land on it and run out of memory.

    Evidence:
    The nvidia-smi row of the pid and its `ps` row with the state.

    Fix:
    Kill or continue the stopped process (its owner, or an administrator); isolate GPUs per job.

    Known false positives:
    A job paused on purpose (a checkpoint-and-suspend scheduler) holds its GPU by design.

    References:
    ps(1) PROCESS STATE CODES; nvidia-smi's process table.
    """
    stopped = {int(s.fields["pid"]): (e, s) for e, s in signals(evidence, "ps.stopped_process")}
    held = [
        item
        for item in signals(evidence, "smi.process_row")
        if int(item[1].fields["pid"]) in stopped and holds_memory(item)
    ]
    if not held:
        return
    row = held[0][1].fields
    ps_row = stopped[int(row["pid"])]
    process = ps_row[1].fields
    state = "a zombie" if str(process["state"]).startswith("Z") else "stopped"
    oom = bool(signals(evidence, "generic.out_of_memory", "memory.cuda_oom"))
    yield Finding(
        title=f"Process {row['pid']} holds {int(row['mib']):,} MiB on GPU {row['gpu']} while {state}",
        summary=f"nvidia-smi lists process {row['pid']} ({row['name']}) with"
        f" {int(row['mib']):,} MiB on GPU {row['gpu']}, and ps shows it in state"
        f" {process['state']} ({state}, owned by {process['user']}): it keeps that memory until"
        " it is continued or killed" + (", and the job ran out of memory." if oom else "."),
        ranks=[],
        confidence=0.7 if oom else 0.6,
        evidence=ids([*held, ps_row]),
        fix=FIX,
        confirm=CONFIRM,
    )
