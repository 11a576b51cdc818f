"""oom.leak: memory grows step over step until it runs out."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.rulebook import EvidenceSet, rule
from triage.rules._oom import MiB, Scored, evidence_of, oom_view, strongest
from triage.signatures.memory import format_size

FIX = (
    "Stop keeping step results alive: accumulate loss.item() or loss.detach() (not loss, which "
    "holds the whole autograd graph), clear lists of outputs/logits each step, run evaluation "
    "under torch.no_grad(), avoid retain_graph=True, and bound caches keyed by step or batch. "
    "The growing line below is where the kept tensors are created."
)
CONFIRM = (
    "allocated memory measured at the same point of several steps (memory_stats per step, or "
    "snapshots of one rank) rises every step at the same user line"
)


def _from_growth(evidence: EvidenceSet) -> list[Scored]:
    out: list[Scored] = []
    for ev, growth in oom_view(evidence).growth:
        first = growth.points[0].allocated or 0
        if not growth.monotonic or growth.growth < max(512 * MiB, first // 10):
            continue
        site = growth.growing_sites[0] if growth.growing_sites else None
        at = (
            f"; most growth at {site.frame.location()} (+{format_size(site.bytes)})" if site else ""
        )
        who = f"Rank {growth.rank}" if growth.rank is not None else "The device"
        confidence = 0.8 if len(growth.points) >= 3 else 0.6
        if site is not None and site.bytes * 2 >= growth.growth:
            confidence += 0.05  # one line accounts for most of it: a specific culprit
        summary = (
            f"{who}'s allocated memory rose in every dump, by {format_size(growth.growth)} over "
            f"{len(growth.points)} dumps ({growth.points[0].label} to {growth.points[-1].label})"
            f"{at}: something created each step is never freed."
        )
        ranks = [growth.rank] if growth.rank is not None else []
        out.append((confidence, summary, ranks, site.frame.location() if site else None, [ev.id]))
    return out


def _from_traces(evidence: EvidenceSet) -> list[Scored]:
    out: list[Scored] = []
    for ev, dump in oom_view(evidence).dumps:
        growth = dump.trace_growth or 0
        if growth < max(256 * MiB, (dump.reserved or 0) // 10):
            continue
        site = dump.unfreed_sites[0] if dump.unfreed_sites else None
        at = (
            f"; never freed: {format_size(site.bytes)} from {site.frame.location()}" if site else ""
        )
        summary = (
            f"In the allocation trace of {ev.source} the memory left after each iteration rose "
            f"by {format_size(growth)}{at}."
        )
        ranks = [dump.rank] if dump.rank is not None else []
        out.append((0.7, summary, ranks, site.frame.location() if site else None, [ev.id]))
    return out


@rule("memory.leak", "oom.leak")
def leak(evidence: EvidenceSet) -> Iterator[Finding]:
    """Memory grows step over step: something allocated every step is kept alive.

    What it detects:
    Several memory dumps of one rank and device (snapshots or memory_stats, in file-name or
    step order) whose allocated memory rises in every dump by at least 512 MiB or 10% in all;
    or one snapshot's recorded allocation trace whose floor (memory left between iterations)
    rises, with the user lines of the allocations never freed.

    Why it happens:
    Tensors that hold autograd graphs are kept across steps (`total_loss += loss`, lists of
    outputs), evaluation runs with gradients, retain_graph=True, or caches grow without bound.
    The job runs for a while and then fails with an OOM that looks like capacity.

    Evidence:
    `read_memory`: memory_growth items (points, growth, growing allocation sites) and
    memory_dump trace_growth / unfreed_sites.

    Fix:
    Keep only Python numbers or detached tensors across steps, clear per-step lists, no_grad
    for evaluation, no retain_graph, bounded caches.

    Known false positives:
    Memory that rises during warm-up (the allocator's cache, the optimizer state created on the
    first step) and then stays flat; dumps of different ranks in one folder without a rank in
    their file names read as one series.

    References:
    https://pytorch.org/docs/stable/torch_cuda_memory.html;
    https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory
    """
    candidates = _from_growth(evidence) + _from_traces(evidence)
    if not candidates:
        return
    gpu = oom_view(evidence).gpu
    (confidence, summary, ranks, location, _), cited = strongest(candidates, *evidence_of(gpu[:1]))
    if gpu:
        summary += f" The OOM itself: {gpu[0].text[:200]}"
    yield Finding(
        rule_id="memory.leak",
        cause_id="oom.leak",
        title="GPU memory grows step over step",
        summary=summary,
        ranks=ranks,
        location=location,
        confidence=round(confidence, 3),
        evidence=cited,
        fix=FIX,
        confirm=CONFIRM,
    )
