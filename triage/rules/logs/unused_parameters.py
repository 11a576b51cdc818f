"""wrong.unused_parameters from logs: DDP parameters that got no gradient (or got it twice)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._signals import ids, ranks_of, signals
from triage.text import rank_label

_TEXT = re.compile(r"finished reduction|not used in producing the loss|graph has changed")
_FIX_UNUSED = (
    "Make every parameter take part in the loss on every rank and iteration (return all "
    "outputs of forward, do not skip branches per rank), or construct DDP with "
    "find_unused_parameters=True (slower); freeze parameters that are never trained "
    "(requires_grad=False) before wrapping."
)
_FIX_STATIC = (
    "static_graph=True requires the same parameters to be used every iteration: drop "
    "static_graph, or make the forward use the same modules every step (use "
    "find_unused_parameters=True for data-dependent branches)."
)


@rule("logs.unused_parameters", "wrong.unused_parameters")
def unused_parameters(evidence: EvidenceSet) -> Iterator[Finding]:
    """DDP failed because parameters got no gradient in an iteration.

    What it detects:
    DDP's `Expected to have finished reduction in the prior iteration before starting a
    new one` (with its static_graph variant `your training graph has changed`), with the
    `Parameters which did not receive grad for rank N: a, b` and `Parameter indices which
    did not receive grad for rank N: 2 3` lines that name the culprits (those lines belong
    to that error alone: pasted without it, they still say it, at 0.85); Lightning's
    `LightningModule has parameters that were not used in producing the loss`. A parameter
    marked ready twice, or a static graph that changed, with no unfinished reduction, is
    config.ddp_reducer (logs.ddp_reducer).

    Why it happens:
    DDP all-reduces gradients in buckets as they become ready; a parameter that did not
    contribute to the loss on a rank (an unused head, a branch skipped on this rank or
    this batch, outputs dropped before the loss) never becomes ready, so the reduction of
    its bucket never finishes.

    Evidence:
    The reducer error on each rank, the parameter names/indices per rank, the user line of
    the forward or backward call.

    Fix:
    Use every parameter in the loss on every rank, or find_unused_parameters=True; freeze
    unused parameters.

    Known false positives:
    None known: the reducer messages are specific to DDP.

    References:
    torch.nn.parallel.DistributedDataParallel docs (find_unused_parameters, static_graph);
    TORCH_DISTRIBUTED_DEBUG=INFO prints the names of the unused parameters.
    """
    reduction = signals(evidence, "ddp.unfinished_reduction", "ddp.lightning_unused")
    twice = signals(evidence, "ddp.marked_ready_twice")
    changed = signals(evidence, "ddp.graph_changed")
    names = signals(evidence, "ddp.unused_parameter_names")
    indices = signals(evidence, "ddp.unused_parameter_indices")
    # "ready twice" and a changed static graph alone are config.ddp_reducer's; the names of
    # the parameters without grad belong to the unfinished-reduction error even pasted alone
    if not reduction and not names and not indices:
        return
    per_rank: dict[int | None, list[str]] = {}
    for _, s in names:
        per_rank.setdefault(s.rank, [])
        per_rank[s.rank] += [p for p in s.fields.get("parameters", []) if p not in per_rank[s.rank]]
    if not per_rank:
        for _, s in indices:
            per_rank.setdefault(s.rank, [f"#{i}" for i in s.fields.get("indices", [])])
    static = bool(changed) or any(s.fields.get("graph_changed") for _, s in reduction)
    what = (
        "the used parameters changed between iterations under static_graph=True"
        if static
        else "DDP parameters got no gradient in the last iteration"
    )
    fix = _FIX_STATIC if static else _FIX_UNUSED
    detail = _describe(per_rank)
    items = reduction + changed
    ranks = sorted(r for r in per_rank if r is not None) or ranks_of(s for _, s in items)
    every = items + names + indices + twice
    confidence = 0.9 if reduction else 0.85
    yield Finding(
        title=what + (f" ({rank_label(ranks)})" if ranks else ""),
        summary=f"{what}.{detail}",
        ranks=ranks,
        location=comm_view(evidence).location(ranks, _TEXT),
        confidence=confidence,
        evidence=ids(every)[:12],
        fix=fix,
        confirm="TORCH_DISTRIBUTED_DEBUG=INFO names the parameters that did not receive grad, "
        "and they are skipped in forward on those ranks",
    )


def _describe(per_rank: dict[int | None, list[str]]) -> str:
    """'Without gradient: head.weight, head.bias on rank 0,1; aux.bias on rank 2.'"""
    if not per_rank:
        return " Set TORCH_DISTRIBUTED_DEBUG=INFO to have DDP name the parameters."
    by_names: dict[tuple[str, ...], list[int | None]] = {}
    for rank, params in per_rank.items():
        by_names.setdefault(tuple(params), []).append(rank)
    parts = []
    for names, ranks in by_names.items():
        shown = ", ".join(names[:8]) + (f" (+{len(names) - 8} more)" if len(names) > 8 else "")
        known = [r for r in ranks if r is not None]
        parts.append(shown + (f" on {rank_label(known)}" if known else ""))
    return " Without gradient: " + "; ".join(parts) + "."
