"""Views of triage.probe evidence that the snapshot rules share: the replica checks in call
order, each rank's snapshot summary, and how to name tensors, ranks and the user line."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from triage.models import Evidence, Location
from triage.observations import Divergence, ReplicaCheck, SnapshotSummary, TensorDivergence
from triage.registry import EvidenceSet
from triage.text import rank_label

SHOWN = 4
CITED = 8
_COUNTED = re.compile(r"(?i)(step|call|iter(ation)?|epoch|batch)\b")
_REDUCING = re.compile(r"DistributedDataParallel|FullyShardedDataParallel|FSDP|fully_shard")


@dataclass
class ProbeView:
    """Replica checks in call order, and the snapshot summary of each (call, rank)."""

    checks: list[tuple[Evidence, ReplicaCheck]] = field(default_factory=list)
    summaries: dict[tuple[str, int | None], tuple[Evidence, SnapshotSummary]] = field(
        default_factory=dict
    )

    @property
    def wrappers(self) -> list[str]:
        return list(dict.fromkeys(w for _, c in self.checks for w in c.wrappers))

    @property
    def reducing(self) -> bool:
        """A wrapper that reduces gradients (DDP, FSDP) wraps the model on some rank."""
        return any(_REDUCING.search(w) for w in self.wrappers)

    def location(self, check: ReplicaCheck, ranks: Iterable[int]) -> Location | None:
        """Where the culprits' main thread was at this call (the snapshot() line in the
        training loop), else where any rank's was."""
        wanted = [*ranks, *check.ranks]
        for rank in wanted[: CITED + len(check.ranks)]:
            found = self.summaries.get((check.label, rank))
            if found and found[1].user_frame:
                return found[1].user_frame.location()
        return None

    def cite(self, item: Evidence, check: ReplicaCheck, ranks: Iterable[int]) -> list[str]:
        """The check, then the snapshots of the first culprit ranks at that call."""
        ids = [item.id]
        for rank in list(ranks)[:CITED]:
            found = self.summaries.get((check.label, rank))
            if found:
                ids.append(found[0].id)
        return ids


def probe_view(evidence: EvidenceSet) -> ProbeView:
    return evidence.derived("probe_view", lambda: _build(evidence))


def _build(evidence: EvidenceSet) -> ProbeView:
    view = ProbeView(checks=evidence.payloads(ReplicaCheck))
    for item, summary in evidence.payloads(SnapshotSummary):
        view.summaries.setdefault((summary.label, summary.rank), (item, summary))
    return view


def named(label: str | None) -> str:
    """A call as prose: 'step 3' or 'call 1' as is, a free tag quoted ('after load')."""
    text = label or "?"
    return text if _COUNTED.match(text) else f"'{text}'"


def diverging(
    check: ReplicaCheck, what: Divergence, kind: str | None = "parameter"
) -> list[TensorDivergence]:
    """The check's tensors that diverge this way (of this kind; None: any)."""
    return [d for d in check.diverging if d.what == what and (kind is None or d.kind == kind)]


def culprits(items: Iterable[TensorDivergence]) -> list[int]:
    """The outlier ranks of these tensors, together."""
    return sorted({r for d in items for r in d.ranks})


def name_tensors(items: list[TensorDivergence], total: int | None = None) -> str:
    """'fc.weight, fc.bias, head.weight (+12 more)'."""
    names = list(dict.fromkeys(d.name for d in items))
    more = max(total if total is not None else len(names), len(names)) - min(len(names), SHOWN)
    return ", ".join(names[:SHOWN]) + (f" (+{more} more)" if more > 0 else "")


def modules(items: Iterable[TensorDivergence]) -> str:
    """The module paths that own the tensors: 'layers.0.attn, head'."""
    paths = list(dict.fromkeys(d.name.rpartition(".")[0] or d.name for d in items))
    return ", ".join(paths[:SHOWN]) + (
        f" (+{len(paths) - SHOWN} more)" if len(paths) > SHOWN else ""
    )


def ranks_phrase(items: list[TensorDivergence]) -> str:
    """Who is the odd one out: 'rank 3, against ranks 0-2, which agree', or every rank with
    '(no majority: ...)'."""
    ranks = culprits(items)
    agree = sorted({r for d in items for r in d.agreeing} - set(ranks))
    label = rank_label(ranks)
    if any(not d.majority for d in items):
        return f"{label} (no majority: every copy differs from the others)"
    which = ", which agree" if len(agree) > 1 else ""
    return f"{label}, against {rank_label(agree)}{which}" if agree else label


def largest_diff(items: Iterable[TensorDivergence]) -> str:
    diffs = [d.max_relative_diff for d in items if d.max_relative_diff is not None]
    return f"; norms differ by up to {max(diffs):.2g} (relative)" if diffs else ""
