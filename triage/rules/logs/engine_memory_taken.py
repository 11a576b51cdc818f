"""oom.other_process from logs: an inference engine starts on a GPU others already fill."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, ids, signals

#: Below this share of the GPU (and this many GiB) held at start-up, the CUDA context, a
#: display and allocator slack explain it: the engine's share is simply set too high.
_HELD = 0.15
_HELD_GIB = 1.5


@rule("logs.engine_memory_taken", "oom.other_process")
def engine_memory_taken(evidence: EvidenceSet) -> Iterator[Finding]:
    """An inference engine found much of its GPU already in use when it started.

    What it detects:
    vLLM's start-up check, `Free memory on device cuda:0 (21.5/79.1 GiB) on startup is less
    than desired GPU memory utilization (0.9, 71.2 GiB)`, when what is missing (total less
    free) is 15% of the GPU and 1.5 GiB or more; SGLang's `The memory capacity is unbalanced.
    Some GPUs may be occupied by other processes` (0.6).

    Why it happens:
    The engine claims a share of the whole GPU (gpu_memory_utilization) and counts what
    other processes hold against it. A trainer colocated with its rollout engine that did
    not offload its weights or optimizer state, a previous engine or job still alive on the
    GPU, or two engines given one GPU leave less free than the share asks.

    Evidence:
    The check's line: free, total, the share asked.

    Fix:
    Find and stop (or offload) what holds the GPU: nvidia-smi --query-compute-apps on the
    host; in RL trainers, offload or sleep the colocated model before the engine starts or
    wakes, or lower gpu_memory_utilization to what is really free.

    Known false positives:
    Memory this job holds on purpose beside the engine (a colocated trainer with offload
    off): then the share, not an intruder, is what to change.

    References:
    https://docs.vllm.ai/en/latest/configuration/conserving_memory.html
    """
    unbalanced = signals(evidence, "memory.engine_unbalanced")
    if unbalanced:
        yield Finding(
            title="some of the engine's GPUs hold less free memory than the others",
            summary=f"`{unbalanced[0][1].text.strip()[:200]}`: before loading the model the"
            " engine found less memory free on some GPUs than on the rest, taken by other"
            " processes (a colocated trainer, an earlier engine or job on those GPUs).",
            ranks=[],
            confidence=0.6,
            evidence=ids(unbalanced)[:4],
            fix="Find what holds those GPUs (nvidia-smi --query-compute-apps=pid,used_memory"
            " --format=csv) and stop or offload it before the engine starts, or give the engine"
            " GPUs nothing else uses (CUDA_VISIBLE_DEVICES).",
            confirm="nvidia-smi shows processes other than the engine's on the GPUs with less"
            " free memory",
        )
        return
    found = [item for item in signals(evidence, "memory.engine_startup_free") if _taken(item)]
    if not found:
        return
    fields = found[0][1].fields
    held = fields["total"] - fields["free"]
    device = fields.get("device") or "the GPU"
    yield Finding(
        title=f"{held:.1f} GiB of {device} was in use before the engine started",
        summary=f"The engine found {fields['free']:.1f} of {fields['total']:.1f} GiB free on"
        f" {device} at start-up and wanted {fields['wanted']:.1f} GiB"
        f" (gpu_memory_utilization {fields['utilization']:g}): {held:.1f} GiB is held by other"
        " processes (a colocated trainer, an earlier engine or job on the GPU).",
        ranks=[],
        confidence=0.65,
        evidence=ids(found)[:4],
        fix="Find what holds the GPU (nvidia-smi --query-compute-apps=pid,used_memory"
        " --format=csv on the host) and stop or offload it before the engine starts: in RL"
        " trainers, offload or sleep the colocated model first; or lower"
        " gpu_memory_utilization to the share that is really free.",
        confirm="nvidia-smi shows processes other than the engine holding memory on that GPU",
    )


def _taken(item: Signal) -> bool:
    """Whether others hold enough of the GPU to be more than a context and a display."""
    total, free = float(item[1].fields["total"]), float(item[1].fields["free"])
    return total > 0 and total - free >= max(_HELD * total, _HELD_GIB)
