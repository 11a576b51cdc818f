"""oom.leak: memory grows step over step until it runs out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from triage.models import Finding
from triage.readers.signatures.memory import format_size
from triage.registry import EvidenceSet, rule
from triage.rules.memory._memory_usage import UsagePoint, UsageSeries, steady_rise
from triage.rules.memory._oom_events import MiB, Scored, evidence_of, strongest
from triage.rules.memory._oom_view import oom_view
from triage.text import rank_label

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


_METRIC_TEXT = {
    "allocated": "allocated memory",
    "peak_allocated": "peak allocated memory",
    "memory": "memory",
    "reserved": "reserved memory",
    "peak_reserved": "peak reserved memory",
}


def _at(point: UsagePoint) -> str:
    return f"step {point.step}" if point.step is not None else f"line {point.line}"


def _from_logs(evidence: EvidenceSet) -> list[Scored]:
    """Memory that training-log lines show rising step after step, per rank."""
    view = oom_view(evidence)
    found = [(s, r) for s in view.usage if (r := steady_rise(s)) is not None]
    if not found:
        return []
    oom_ranks = {e.rank for e in view.gpu if e.rank is not None}
    oom_files = {e.path for e in view.gpu}

    def score(series: UsageSeries) -> float:
        if not view.gpu:
            return 0.4  # growth alone: nothing ran out (yet)
        own = series.rank in oom_ranks or series.path in oom_files
        confidence = 0.65 if own else 0.6
        if len(series.points) >= 8:
            confidence += 0.05
        if series.metric.endswith("reserved"):
            confidence -= 0.05  # the cache also grows from fragmentation
        return confidence

    series, rise = max(found, key=lambda pair: (score(pair[0]), pair[1].growth))
    ranks = sorted({s.rank for s, _ in found if s.rank is not None})
    others = [r for r in ranks if r != series.rank]
    also = f" ({rank_label(others)} too)" if others else ""
    what = _METRIC_TEXT.get(series.metric, "memory")
    summary = (
        f"{series.who().capitalize()}'s {what} rose from {format_size(rise.start.value)} at "
        f"{_at(rise.start)} to {format_size(rise.end.value)} at {_at(rise.end)} "
        f"({len(series.points)} {series.signature} lines of {Path(series.path).name}), "
        f"{format_size(rise.tail_growth)} of it from {_at(rise.tail_start)} on{also}: memory "
        "kept from each step is never freed."
    )
    ids = [p.evidence for p in series.points]
    cited = (ids[:2] + ids[-4:]) if len(ids) > 6 else ids
    return [(round(score(series), 3), summary, ranks, None, cited)]


@rule("memory.leak", "oom.leak")
def leak(evidence: EvidenceSet) -> Iterator[Finding]:
    """Memory grows step over step: something allocated every step is kept alive.

    What it detects:
    Several memory dumps of one rank and device (snapshots or memory_stats, in file-name or
    step order) whose allocated memory rises in every dump by at least 512 MiB or 10% in all;
    or one snapshot's recorded allocation trace whose floor (memory left between iterations)
    rises, with the user lines of the allocations never freed; or the memory a rank's log
    prints step after step (DeepSpeed see_memory_usage, torchtitan, torchtune, OpenMMLab,
    detectron2, `step N ... memory_allocated: X GB`, memory_summary tables): at least 5 lines,
    few of them lower than the one before, whose floor rises by more than 1 GiB and 20% and
    still rises over their second half (warm-up rises, then stops). Weaker than dumps (0.6 to
    0.7 with an OOM in the logs, 0.4 without one): no allocation site, and the figure may be
    a peak or the cache.

    Why it happens:
    Tensors that hold autograd graphs are kept across steps (`total_loss += loss`, lists of
    outputs), evaluation runs with gradients, retain_graph=True, or caches grow without bound.
    The job runs for a while and then fails with an OOM that looks like capacity.

    Evidence:
    `read_memory`: memory_growth items (points, growth, growing allocation sites) and
    memory_dump trace_growth / unfreed_sites; the log lines of `memory.step_usage`,
    `memory.deepspeed_usage`, `memory.mm_usage`, `memory.torchtune_usage`, `memory.summary`.

    Fix:
    Keep only Python numbers or detached tensors across steps, clear per-step lists, no_grad
    for evaluation, no retain_graph, bounded caches.

    Known false positives:
    Memory that rises during warm-up (the allocator's cache, the optimizer state created on the
    first step) and then stays flat; dumps of different ranks in one folder without a rank in
    their file names read as one series. From logs: growing sequence lengths or a curriculum
    raise the per-step peak without a leak. The log scan keeps the first 3 and the last 12
    lines of each series, so a leak too slow to show in the last ones goes unreported.

    References:
    https://pytorch.org/docs/stable/torch_cuda_memory.html;
    https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory
    """
    candidates = _from_growth(evidence) + _from_traces(evidence) + _from_logs(evidence)
    if not candidates:
        return
    gpu = oom_view(evidence).gpu
    (confidence, summary, ranks, location, _), cited = strongest(candidates, *evidence_of(gpu[:1]))
    if gpu:
        summary += f" The OOM itself: {gpu[0].text[:200]}"
    yield Finding(
        title="GPU memory grows step over step",
        summary=summary,
        ranks=ranks,
        location=location,
        confidence=round(confidence, 3),
        evidence=cited,
        fix=FIX,
        confirm=CONFIRM,
    )
