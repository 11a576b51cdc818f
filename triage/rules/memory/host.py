"""oom.host: host RAM or the container's memory limit ran out."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.memory._oom_view import oom_view
from triage.text import agree, rank_label

FIX = (
    "Reduce host memory per node: fewer DataLoader workers or a smaller prefetch_factor, "
    "datasets memory-mapped or sharded instead of loaded whole in every rank and worker, "
    "checkpoints loaded with torch.load(..., mmap=True) or straight to each rank's GPU instead "
    "of full CPU copies per rank, no pin_memory of huge batches; raise the container or Slurm "
    "memory limit (--mem) when the job needs it. `dmesg -T | grep -i 'killed process'` or "
    "`journalctl -k` names what the OOM killer took."
)
CONFIRM = (
    "the kernel log (dmesg) or the scheduler reports the OOM killer, or a rank died with "
    "SIGKILL (-9) and no GPU out-of-memory error of its own"
)
_KILLS = frozenset(
    {
        "memory.exit_137",
        "memory.exit_sigkill",
        "memory.shell_killed",
        "elastic.worker_failed",
        "elastic.child_failed",
        "elastic.process_signal",
        "spawn.process_signal",
    }
)
_WEAK = _KILLS | {"memory.dataloader_exited", "elastic.teardown"}


@rule("memory.host", "oom.host")
def host(evidence: EvidenceSet) -> Iterator[Finding]:
    """The host, not the GPU, ran out of memory: the OOM killer or an allocation failed.

    What it detects:
    The kernel's OOM killer (`Out of memory: Killed process N`, or its report's first line
    `python invoked oom-killer: gfp_mask=...`), Slurm's `oom-kill event`, LSF's
    `TERM_MEMLIMIT`, a container OOMKilled or exit code 137, a DataLoader worker killed by signal Killed,
    a worker SIGKILLed (-9, from torchelastic's report, DeepSpeed's `exits with return code
    = -9` or subprocess's `died with <Signals.SIGKILL: 9>`), `std::bad_alloc`, Python MemoryError,
    torch's DefaultCPUAllocator failing, or ENOMEM (`Cannot allocate memory`); pinned host
    memory refused (NCCL's `Failed to CUDA host alloc N bytes`, 0.5); Slurm's `Exceeded step
    memory limit at some point` (0.4: jobs that succeed print it too); weaker (0.3),
    the launcher stopping its workers (`Killing subprocess N`, `closing signal SIGTERM`)
    while no process printed a traceback or an error.

    Why it happens:
    Every rank and every DataLoader worker holds its own copy of the dataset, the checkpoint
    or the model on the CPU; pinned-memory buffers; memory-hungry preprocessing; a container
    or Slurm limit lower than the node. The OOM killer sends SIGKILL: no Python traceback,
    only an exit code -9 or 137.

    Evidence:
    `memory.*` host signatures and the launcher's worker failures with SIGKILL
    (elastic.worker_failed / child_failed / process_signal), or mp.spawn's
    `process N terminated with signal SIGKILL` (spawn.process_signal).

    Fix:
    Fewer workers or less prefetch, memory-mapped or sharded data, mmap'd checkpoint loading,
    a higher memory limit.

    Known false positives:
    SIGKILL also comes from schedulers (time limit, preemption) and from torchelastic
    stopping the remaining workers after another rank failed; those are weaker signs and
    weaker still when a GPU OOM is in the logs. A worker that crashed in native code (a
    segfault the text does not show) also dies without a traceback. A shell's `Killed` after
    a launcher says it kills its own processes (SGLang's `Received sigquit from a child
    proces`) is that teardown and is not read.

    References:
    https://pytorch.org/docs/stable/data.html#multi-process-data-loading;
    https://www.kernel.org/doc/gorman/html/understand/understand016.html
    """
    view = oom_view(evidence)
    if not view.host:
        return
    gpu_ranks = {e.rank for e in view.gpu}
    scored = []
    for event in view.host:
        strength = event.strength
        if (
            event.signature in _WEAK
            and view.gpu
            and (event.rank in gpu_ranks or event.rank is None)
        ):
            strength -= 0.25  # the worker died of its GPU OOM, then was killed
        scored.append((strength, event))
    confidence, top = max(scored, key=lambda item: item[0])
    culprits = [e for s, e in scored if s >= confidence - 0.15]
    ranks = sorted({e.rank for e in culprits if e.rank is not None})
    who = rank_label(ranks) if ranks else "a process of the job"
    if top.signature == "elastic.teardown":
        what = (
            f"The launcher stopped the job's workers (`{top.text.strip()[:120]}`) and no process"
            " printed a traceback or an error: the one that exited first died without one, as"
            " the kernel's OOM killer (SIGKILL) leaves a process, or crashed in native code."
        )
    elif top.signature in _KILLS:
        what = f"{who.capitalize()} {agree(len(ranks) or 1, 'were')} killed by SIGKILL, the OOM killer's signal: {top.text[:200]}"
    else:
        what = f"{who.capitalize()} ran out of host memory: {top.text[:240]}"
    yield Finding(
        title="Host memory ran out",
        summary=what,
        ranks=ranks,
        confidence=round(max(0.1, confidence), 3),
        evidence=[e.evidence for e in culprits][:12],
        fix=FIX,
        confirm=CONFIRM,
    )
