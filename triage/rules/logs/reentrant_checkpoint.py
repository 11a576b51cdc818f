"""config.ddp_reducer from logs, as a last resort: reentrant checkpointing's warning beside a
rank's traceback cut before its exception."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids, signals, tracebacks
from triage.rules.logs.ddp_reducer import FIX_REENTRANT


@rule("logs.reentrant_checkpoint", "config.ddp_reducer", last_resort=True)
def reentrant_checkpoint(evidence: EvidenceSet) -> Iterator[Finding]:
    """Reentrant activation checkpointing without an input that requires grad, and a rank
    that failed with its exception line cut off; nothing else fires.

    What it detects:
    torch.utils.checkpoint's `None of the inputs have requires_grad=True. Gradients will be
    None` with a rank's `Traceback (most recent call last):` that stops at a frame.

    Why it happens:
    Reentrant checkpointing (use_reentrant=True, the transformers default for years) re-runs
    each block's forward inside backward. When none of the block's inputs requires grad
    (frozen embeddings under LoRA or PEFT), its parameters get their gradients out of DDP's
    order or not at all: DDP then stops with `Expected to mark a variable ready only once`
    or with `Expected to have finished reduction in the prior iteration`. Which of the two
    is on the exception line the paste lost; use_reentrant=False cures both.

    Evidence:
    The warning and the cut traceback.

    Fix:
    Non-reentrant checkpointing (gradient_checkpointing_kwargs={'use_reentrant': False}),
    or make the inputs require grad (enable_input_require_grads()).

    Known false positives:
    A rank that failed for another reason while the warning was printed (it is only a
    warning); it stands only when no other rule finds anything.

    References:
    torch.utils.checkpoint docs (use_reentrant); huggingface/trl#912.
    """
    warned = signals(evidence, "ddp.reentrant_no_grad_inputs")
    if not warned:
        return
    cut = [
        (item, record, rank)
        for item, record in tracebacks(evidence, dumps=False)
        if record.exception is None and (rank := record.rank) is not None
    ]
    if not cut:
        return
    item, record, rank = cut[0]
    yield Finding(
        title=f"reentrant checkpointing got no input that requires grad, and rank {rank} failed",
        summary="torch.utils.checkpoint warns that none of a checkpointed block's inputs"
        f" requires grad, and rank {rank}'s traceback stops before its exception."
        " Under DDP, reentrant checkpointing then marks a parameter ready twice (`Expected to"
        " mark a variable ready only once`) or leaves it without a gradient (`Expected to"
        " have finished reduction`); the lost exception line says which, and the same fix"
        " cures both.",
        ranks=[rank],
        location=(record.user_frame.location() if record.user_frame else None),
        confidence=0.3,
        evidence=[*ids(warned)[:2], item.id],
        fix=FIX_REENTRANT,
        confirm="the exception line after the traceback's last frame; the failure goes away"
        " with use_reentrant=False",
    )
