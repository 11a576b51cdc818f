"""wrong.nan from probe snapshots: parameters, gradients or buffers holding NaN/Inf, on which
ranks, and at which call they first appeared."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.probe._replica_view import culprits, diverging, name_tensors, named, probe_view
from triage.text import rank_label, rank_subject

_FIX = (
    "Find the first non-finite value on the named ranks: run a few steps with "
    "torch.autograd.set_detect_anomaly(True) (it names the op), check those ranks' batches "
    "for NaN/Inf inputs or labels, lower the learning rate or add warmup and gradient "
    "clipping (clip_grad_norm_(..., error_if_nonfinite=True)), keep a loss scaler for fp16 "
    "or use bf16, and add eps to divisions, logs and square roots."
)


@rule("probe.nan", "wrong.nan")
def nan(evidence: EvidenceSet) -> Iterator[Finding]:
    """Snapshots show NaN or Inf in parameters, gradients or buffers.

    What it detects:
    The first call whose snapshots hold non-finite elements in a tensor's value or
    gradient, the tensors and the ranks that hold them; ranks that are still clean at that
    call are the reference.

    Why it happens:
    Exploding gradients (learning rate, no warmup or clipping), fp16 overflow without a
    loss scaler, log/sqrt/division of zero, or a bad sample in one rank's shard. A NaN
    gradient on one rank reaches every replica through the all-reduce, so the earliest
    call that shows it, and the ranks that show it first, point at the source.

    Evidence:
    Replica checks (read_probe_snapshots): the nonfinite counts per tensor, rank and part
    (value or grad), and the call; the snapshot's user line.

    Fix:
    Enable anomaly detection to name the op, validate the data of the named ranks, lower
    the learning rate or clip gradients, use bf16 or a loss scaler, add eps.

    Known false positives:
    A buffer that holds Inf by design (an attention mask filled with -inf) is reported
    too; its name tells it apart.

    References:
    torch.autograd.detect_anomaly; torch.nn.utils.clip_grad_norm_(error_if_nonfinite);
    torch.amp.GradScaler.
    """
    view = probe_view(evidence)
    earlier = []
    for item, check in view.checks:
        found = diverging(check, "nonfinite", kind=None)
        if not found:
            earlier.append(check.label)
            continue
        grads = [d for d in found if d.part == "grad"]
        values = [d for d in found if d.part != "grad"]
        ranks = culprits(found)
        clean = sorted(set(check.ranks) - set(ranks))
        parts = []
        if grads:
            parts.append(f"gradients of {name_tensors(grads)}")
        if values:
            parts.append(f"values of {name_tensors(values)}")
        scope = (
            f" {rank_subject(clean, 'are').capitalize()} still "
            f"clean, so the NaN starts on {rank_label(ranks)}."
            if clean
            else " Every rank holds them: the all-reduce spread them, or they began before."
        )
        shown = ", ".join(named(label) for label in earlier[-2:])
        before = f" The snapshots at {shown} were clean." if earlier else ""
        total = check.counts.get("nonfinite", len(found))
        yield Finding(
            title=f"NaN/Inf on {rank_label(ranks)} at {named(check.label)}",
            summary=f"At {named(check.label)}, {rank_subject(ranks, 'hold')} NaN/Inf in the "
            f"{' and the '.join(parts)} ({total} tensors).{scope}{before} "
            f"{found[0].detail}.",
            ranks=ranks,
            location=view.location(check, ranks),
            confidence=0.9 if clean else 0.85,
            evidence=view.cite(item, check, ranks),
            fix=_FIX,
            confirm=f"with torch.autograd.set_detect_anomaly(True), {rank_subject(ranks, 'fail')} "
            "at the op that first produces NaN/Inf",
        )
        return
