"""hang.shape_mismatch from logs: the same collective, different sizes or dtypes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._hang_lines import (
    HangLog,
    Split,
    hang_log,
    positions_text,
    same_op_reports,
    unpaired_reports,
)
from triage.rules.logs._refusals import refusals, refused
from triage.rules.logs._signals import ids, ranks_of, signals
from triage.rules.stacks.shape_mismatch import reshaped_call
from triage.text import format_ranks, rank_label

_TRUST = {
    "fingerprint": 0.88,
    "watchdog": 0.75,
    "opcount": 0.7,
    "opcount_device": 0.6,
    "print": 0.55,
}


@rule("logs.shape_mismatch", "hang.shape_mismatch")
def shape_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks are in the same collective (number and op) with different tensor sizes.

    What it detects:
    TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints with equal SequenceNumber and OpType but
    different TensorShape or TensorDtypes (`Collectives differ in the following aspects:
    Tensor Tensor shapes: 4vs 5`), NCCL watchdog timeouts of one work with different
    NumelIn, or NCCL COLL lines of one opCount with different count or datatype; older
    torch's DETAIL errors in which two or more ranks each call the same op inconsistent;
    DDP's own check of the model across ranks (`DDP expects same model across all ranks`,
    `appears not to match sizes of the same param in process 0`, 0.55); gloo's check of
    the bytes a pair receives (`op.preamble.length <= op.nbytes. 8 vs 4`, `Received data
    size doesn't match expected size`, 0.7) and NCCL's network transports' (`NET/Socket :
    message truncated : receiving 1048576 bytes instead of 65536`, `NET/IB : ... collective
    mismatch error, local size 4096 remote size 8192`, 0.6); accelerate's debug-mode check (`Cannot apply
    desired operation due to shape mismatches`, with each process's shape listed: 0.8 naming
    the processes off the majority's shape, 0.7 with no majority).

    Why it happens:
    A tensor whose size depends on the rank's data: the last uneven batch, variable-length
    sequences or predictions gathered with all_gather, a dtype that differs (AMP on one
    rank), or a parameter list that differs across ranks. NCCL may hang or corrupt memory;
    gloo and DETAIL raise.

    Evidence:
    The minority's size against the majority's at the same collective, and the rank's
    user line from its traceback.

    Fix:
    Give the collective the same shape and dtype on every rank: pad to a common size
    (exchange sizes first), use all_gather_object for ragged data, or all_to_all_single
    with explicit split sizes.

    Known false positives:
    all_to_all and point-to-point ops may differ in size by design; they are not compared.

    References:
    torch.distributed.all_gather_object; TORCH_DISTRIBUTED_DEBUG=DETAIL.
    """
    view = hang_log(evidence)
    candidates = [s for s in view.splits if s.how == "shape"]
    if not candidates:
        yield from _transport_sizes(evidence, view)
        yield from _process_shapes(evidence, view)
        yield from _same_op(evidence)
        yield from _reshaped(view)
        yield from _models_differ(evidence)
        yield from _checked(evidence)
        return
    best = max(candidates, key=_confidence)
    culprits = format_ranks(best.ranks)
    others = (
        f", and {positions_text(best.majority)}"
        if best.majority
        else "; the logs cannot tell which size is wrong"
    )
    yield Finding(
        title=f"rank {culprits} passed a different tensor size to the same collective",
        summary=f"The {best.ledger.label} put {positions_text(best.culprits)}{others}.",
        ranks=best.ranks,
        location=view.location(best.ranks),
        other_locations=[
            loc for loc in [view.location(p.rank for p in best.majority)] if loc is not None
        ],
        confidence=_confidence(best),
        evidence=best.evidence[:8],
        fix=(
            f"Make the tensor rank {culprits} passes the same shape and dtype as on the other "
            "ranks: pad to a common size after exchanging sizes, or use all_gather_object for "
            "ragged data."
        ),
        confirm=f"rank {culprits}'s tensor at that call has another shape than the others'",
    )


def _confidence(split: Split) -> float:
    return round(_TRUST[split.ledger.source] * (1.0 if split.decided else 0.85), 3)


def _transport_sizes(evidence: EvidenceSet, view: HangLog) -> Iterator[Finding]:
    """gloo's or NCCL's network check on a receiving pair: a peer sent more bytes than this
    rank's collective holds. The ranks met in collectives of different sizes: one tensor sized from
    the rank's data (or a list of another length), or a different collective at that point;
    the bytes do not say which rank is odd."""
    found = signals(evidence, "gloo.size_mismatch", "nccl.net_size_mismatch")
    if not found:
        return
    nccl = any(s.signature == "nccl.net_size_mismatch" for _, s in found)
    sizes = next(
        (
            f" ({s.fields['received']} bytes arrived, {s.fields['expected']} expected)"
            for _, s in found
            if s.fields.get("received")
        ),
        "",
    )
    receivers = ranks_of(s for _, s in found)  # where the check fired, not the odd rank
    yield Finding(
        title=f"the ranks passed different sizes to one {'NCCL' if nccl else 'gloo'}"
        f" collective{sizes}",
        summary=f"{'NCCL' if nccl else 'gloo'}'s receiving side got more bytes than its own"
        " collective holds, so the ranks were in collectives of different sizes: a tensor sized"
        " from the rank's data (a last batch, filtered samples, an object list of another"
        " length), or a different collective at that point"
        + (", or NCCL_PROTO/NCCL_ALGO set differently on some ranks" if nccl else "")
        + ". The transport does not say which rank's size is the odd one.",
        ranks=[],
        # the pair's check runs on gloo's thread; a peer's traceback holds the collective
        location=view.location(receivers) or comm_view(evidence).location([]),
        confidence=0.6 if nccl else 0.7,
        evidence=ids(found[:8]),
        fix="Give the collective the same shape and dtype on every rank: pad to a common size"
        " after exchanging sizes, use all_gather_object for ragged data, pass"
        " broadcast_object_list a list of the same length everywhere; and check that every"
        " rank reaches the same collectives in the same order"
        + ("; set NCCL_PROTO and NCCL_ALGO alike on every rank, or on none." if nccl else "."),
        confirm="TORCH_DISTRIBUTED_DEBUG=DETAIL names the collective and each rank's shapes",
    )


def _process_shapes(evidence: EvidenceSet, view: HangLog) -> Iterator[Finding]:
    """accelerate's debug mode gathers every process's shape before a gather or reduce and
    lists them when they differ: the processes whose shape the others do not share are the
    odd ones, unless no shape has a majority."""
    if not signals(evidence, "accelerate.shape_mismatch"):
        return
    listed = signals(evidence, "accelerate.process_shape")
    shapes = {int(s.fields["process"]): str(s.fields["shape"]) for _, s in listed}
    counts = Counter(shapes.values())
    common, most = counts.most_common(1)[0] if counts else ("", 0)
    decided = most > len(shapes) / 2
    odd = sorted(p for p, shape in shapes.items() if shape != common) if decided else []
    seen = ", ".join(f"process {p}: {shape}" for p, shape in sorted(shapes.items())[:8])
    who = f"process {format_ranks(odd)}" if odd else "the processes"
    yield Finding(
        title=f"{who} passed a tensor of another shape to accelerate's collective",
        summary=f"accelerate compared the shapes before the operation ({seen})"
        + ("." if decided else "; no shape has a majority, so the odd side cannot be told."),
        ranks=odd,
        location=view.location(odd) or comm_view(evidence).location([]),
        confidence=0.8 if decided else 0.7,
        evidence=ids((signals(evidence, "accelerate.shape_mismatch") + listed)[:8]),
        fix="Give the tensor the same shape on every process before gather or reduce: pad"
        " with accelerator.pad_across_processes (or gather_for_metrics, which handles the"
        " last uneven batch), or gather objects with gather_object for ragged data.",
        confirm="print the tensor's shape on each process before the call",
    )


def _models_differ(evidence: EvidenceSet) -> Iterator[Finding]:
    """DDP's check of the module across ranks failed: the broadcast of the parameters would
    have met tensors of other sizes, so DDP stops first and says so."""
    found = signals(evidence, "ddp.model_differs")
    if not found:
        return
    ranks = ranks_of(s for _, s in found)
    yield Finding(
        title="the ranks built different models (DDP's parameter check failed)",
        summary=f"DDP compared the model's parameters across ranks when it wrapped it and found"
        f" them different (`{found[0][1].text[:160]}`): some rank has other layers or other"
        " sizes, and the collectives that keep replicas in step cannot pair them.",
        ranks=ranks,
        location=hang_log(evidence).location(ranks),
        confidence=0.55,
        evidence=ids(found[:8]),
        fix="Build the same model on every rank: no rank- or host-dependent layers or config"
        " values, the same checkpoint (and strict loading) everywhere, and freezing or"
        " resizing applied before DDP wraps the model on every rank alike.",
        confirm="print sum(p.numel() for p in model.parameters()) on each rank before DDP",
    )


def _same_op(evidence: EvidenceSet) -> Iterator[Finding]:
    """Older torch's DETAIL errors name only the reporter's own fingerprint; when every
    reporter runs the same op, the collectives differ in their tensors."""
    reports = unpaired_reports(evidence)
    if not same_op_reports(reports):
        return
    ranks = sorted({int(s.fields["rank"]) for _, s in reports if s.fields.get("rank") is not None})
    op = reports[0][1].fields["op"]
    shapes = sorted({str(s.fields["shape"]) for _, s in reports if s.fields.get("shape")})
    seen = f" ({' vs '.join(shapes)})" if len(shapes) > 1 else ""
    yield Finding(
        title=f"{rank_label(ranks)} passed different tensors to the same {op}",
        summary=(
            f"{rank_label(ranks).capitalize()} "
            f"{'reports its' if len(ranks) == 1 else 'each report their'} {op} as inconsistent with the other "
            f"ranks'{seen}: the op is the same everywhere, so the tensors' shapes or dtypes "
            "differ. The report does not say which rank's size is the odd one."
        ),
        ranks=ranks,
        location=hang_log(evidence).location(ranks),
        confidence=0.65,
        evidence=ids(reports[:8]),
        fix=(
            f"Give the {op} the same shape and dtype on every rank: pad to a common size "
            "(exchange sizes first) or use all_gather_object for ragged data; a batch whose "
            "size depends on the rank's data (the last batch, filtered samples) is the usual "
            "source."
        ),
        confirm="each rank's tensor shape at that call (print it before the collective)",
    )


def _reshaped(view: HangLog) -> Iterator[Finding]:
    """Every rank timed out at one call whose input a rank-dependent `if` above it changes
    (read from the source): the ranks that took it passed another size."""
    ranks = sorted(view.waiting)
    where = view.location(ranks)
    if not ranks or not view.one_wait() or where is None or where.line is None:
        return
    found = reshaped_call(where)
    if found is None:
        return
    because, fix, changed = found
    yield Finding(
        title="every rank timed out in the same collective, whose input some ranks change",
        summary=f"{rank_label(ranks).capitalize()} timed out in the same collective at {where}. {because}",
        ranks=[],
        location=where,
        other_locations=[changed],
        confidence=0.6,
        evidence=[i for r in ranks for i in view.waiting[r][:1]][:8],
        fix=fix,
        confirm="TORCH_DISTRIBUTED_DEBUG=DETAIL shows the ranks' TensorShape differ there",
    )


def _checked(evidence: EvidenceSet) -> Iterator[Finding]:
    """A check that compared the ranks' tensors at one collective found different shapes or
    dtypes."""
    found = refusals(evidence, sizes=True)
    if not found:
        return
    line, reporters = found[0][1], ranks_of(s for _, s in found)
    said, confidence = refused(line)
    yield Finding(
        title=f"the ranks' tensors differ at one collective: {line.fields['what']}",
        summary=f"{said} It does not say which rank is the odd one.",
        ranks=[],
        location=hang_log(evidence).location(reporters),
        confidence=confidence,
        evidence=ids(found[:8]),
        fix="Give that tensor the same shape and dtype on every rank: a batch or a list whose"
        " size depends on the rank's data (pad it after exchanging sizes, or gather ragged data"
        " as objects), a model or optimizer built differently on some ranks (a parameter that"
        " only some ranks create).",
        confirm="print the tensor's shape and dtype before the collective on every rank",
    )
