"""wrong.nan from logs: NaN or Inf in the loss, the gradients or the outputs, and where first."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._signals import Signal, ids, ranks_of, signals
from triage.text import rank_label

SAME_STEP_LINES = 10
_TEXT = re.compile(r"(?i)nan|inf|non-finite|FloatingPointError|loss scale")

#: signature -> (confidence, what it shows)
_KINDS = {
    "nan.anomaly": (0.88, "autograd anomaly detection caught a backward op producing NaN/Inf"),
    "nan.rank_check": (0.86, "a per-rank check found NaN/Inf in the gradients or the loss"),
    "nan.nonfinite_grad_norm": (0.86, "the gradient norm is NaN/Inf"),
    "nan.loss_scale_floor": (
        0.85,
        "the fp16 loss scaler hit its minimum: gradients keep overflowing",
    ),
    "nan.floating_point_error": (
        0.8,
        "training stopped on a non-finite value (FloatingPointError)",
    ),
    "nan.found": (0.75, "a check found NaN/Inf in a tensor"),
    "nan.count": (0.7, "a probe counted NaN/Inf values in a tensor"),
    "nan.loss_value": (0.75, "the loss (or gradient norm) is NaN/Inf"),
    "nan.invalid_probabilities": (0.6, "sampling got NaN/Inf probabilities"),
}
_FIX = (
    "Find the first non-finite value: run with torch.autograd.set_detect_anomaly(True) for a "
    "few steps (it names the op), check inputs and labels for NaN/Inf, lower the learning "
    "rate or add warmup and gradient clipping, use bf16 or keep the loss scaler (fp16), and "
    "add eps to divisions, logs and sqrt; if only some ranks show it, inspect the data shard "
    "those ranks read."
)


@rule("logs.nan", "wrong.nan")
def nan(evidence: EvidenceSet) -> Iterator[Finding]:
    """Training produced NaN or Inf: in the loss, the gradients, or a tensor a check inspects.

    What it detects:
    Anomaly mode's `Function 'XBackward0' returned nan values in its 0th output`,
    clip_grad_norm_'s `total norm ... is non-finite`, loss scalers giving up (`Current loss
    scale already at minimum`, `Minimum loss scale reached`) or at their floor (apex's and
    fairseq's scale set below 1, DeepSpeed's and FP16_Optimizer's `Attempted loss scale: 1`:
    every step overflows; a scale in the thousands halving is the scaler at work),
    `FloatingPointError` (e.g. `Loss became infinite or NaN at iteration=N`), training loops
    printing `Loss is nan`,
    `'loss': nan`, `grad_norm: inf`, `found NaN in local grad norm`, a probe's count of
    NaNs above zero (`n_nan=127/127`, `nan_count: 3`, `has_nan=True`), and sampling's
    `probability tensor contains either inf, nan or element < 0`.

    Why it happens:
    Exploding gradients (learning rate, missing warmup or clipping), fp16 overflow,
    log/sqrt/division of zero, bad samples (NaN/Inf in inputs or labels) in one rank's
    shard; one rank's NaN gradients reach every replica through the all-reduce, so the
    rank that reports it first is the one to inspect.

    Evidence:
    The first NaN message per rank, the op anomaly mode names, the user line.

    Fix:
    Enable anomaly detection to find the op, validate the data, lower the learning rate
    or clip gradients, use bf16 or a loss scaler, add eps to unstable math.

    Known false positives:
    fp16 runs print occasional overflow/skip-step messages that are normal; only the
    scaler giving up is reported. A `nan` metric on an empty evaluation set is not a
    training NaN.

    References:
    torch.autograd.detect_anomaly; torch.nn.utils.clip_grad_norm_(error_if_nonfinite);
    torch.amp.GradScaler.
    """
    found: list[tuple[float, str, list[Signal]]] = []
    for name, (confidence, what) in _KINDS.items():
        items = signals(evidence, name)
        if items:
            found.append((confidence, what, items))
    if not found:
        return
    confidence, what, items = max(found, key=lambda f: f[0])
    every = sorted(
        (item for _, _, group in found for item in group), key=lambda i: (i[1].path, i[1].line)
    )
    ranks = _first_ranks(every)
    anomaly = next((s for _, s in items if s.signature == "nan.anomaly"), None)
    op = f" ({anomaly.fields['function']})" if anomaly and anomaly.fields.get("function") else ""
    all_ranks = ranks_of(s for _, s in every)
    scope = (
        f" First seen on {rank_label(ranks)} of {rank_label(all_ranks)}."
        if ranks and len(all_ranks) > len(ranks)
        else (f" On {rank_label(ranks)}." if ranks else "")
    )
    yield Finding(
        title=what + op,
        summary=f"{what}{op}: `{items[0][1].text[:200]}`.{scope}",
        ranks=ranks,
        location=comm_view(evidence).location(ranks, _TEXT),
        confidence=confidence,
        evidence=ids(every)[:12],
        fix=_FIX,
        confirm="with torch.autograd.set_detect_anomaly(True) the run fails at the op that "
        "first produces NaN/Inf",
    )


def _first_ranks(items: list[Signal]) -> list[int]:
    """Ranks whose log shows a NaN earliest. In one interleaved file: the ranks whose first
    NaN line is within a few lines of the earliest (the same step); across per-rank files
    (no common clock): every rank that shows one."""
    first: dict[int, int] = {}
    paths = set()
    for _, s in items:
        if s.rank is not None:
            first[s.rank] = min(first.get(s.rank, s.line), s.line)
            paths.add(s.path)
    if len(paths) > 1 or not first:
        return sorted(first)
    earliest = min(first.values())
    return sorted(r for r, line in first.items() if line - earliest <= SAME_STEP_LINES)
