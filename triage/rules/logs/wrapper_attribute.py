"""config.unknown from logs: code read a model's attribute through the DDP wrapper."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.observations import TracebackRecord
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, tracebacks

#: nn.Module.__getattr__'s wording for a wrapper that does not forward attribute reads to the
#: module it wraps (FSDP and DeepSpeed's engine forward them; these two do not).
_WRAPPER = re.compile(
    r"'(?P<wrapper>DistributedDataParallel|DataParallel)' object has no attribute"
    r" '(?P<attribute>\w+)'"
)
#: The other way round: `.module` read from a model that no wrapper holds.
_UNWRAPPED = re.compile(r"'(?P<model>\w+)' object has no attribute 'module'")


@rule("logs.wrapper_attribute", "config.unknown")
def wrapper_attribute(evidence: EvidenceSet) -> Iterator[Finding]:
    """Code written for the bare model read one of its attributes through the DDP wrapper.

    What it detects:
    An AttributeError `'DistributedDataParallel' object has no attribute 'dtype'` (or
    `'DataParallel' ...`): DistributedDataParallel and DataParallel hold the model as
    `.module` and answer only their own attributes, so `model.config`, `model.generate`,
    `unet.dtype` or a custom method fail once the model is wrapped. It runs on one GPU and
    fails on several, where the script (or accelerate's prepare, Lightning's strategy) wraps.

    Why it happens:
    The script wraps the model in DDP for a multi-GPU launch and keeps calling what the bare
    model had: its config, its generate(), its own helper methods, its dtype.

    Evidence:
    The AttributeError with the wrapper and the attribute, and the user frame that read it.

    Fix:
    Read it from the wrapped model: `model.module.<attribute>`, or under accelerate
    `accelerator.unwrap_model(model).<attribute>`; keep a reference to the bare model before
    wrapping it and call its own methods (generate, save_pretrained) on that.

    The other way round (0.6): `'Linear' object has no attribute 'module'`, code written for
    the wrapped model reading `.module` from a model no wrapper holds (a one-process run, a
    launch that skipped wrapping, a model unwrapped already).

    Known false positives:
    An attribute the model itself does not have either (a typo): the wrapper's name is then
    in the message all the same, and unwrapping moves the error one line further.

    References:
    https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """
    for item, record in tracebacks(evidence, dumps=False):
        if record.exception != "AttributeError":
            continue
        bare = _UNWRAPPED.search(record.message)
        if bare is not None and bare["model"] not in ("DistributedDataParallel", "DataParallel"):
            yield _read_module_of_bare_model(item.id, record, bare["model"])
            return
        found = _WRAPPER.search(record.message)
        if found is None:
            continue
        wrapper, attribute = found["wrapper"], found["attribute"]
        frame = record.user_frame
        yield Finding(
            title=f"the code read `{attribute}` through the {wrapper} wrapper, which does not"
            " forward it",
            summary=f"`{record.exception}: {record.message[:160]}`: {wrapper} holds the model as"
            f" `.module` and answers only its own attributes, so `{attribute}` must be read from"
            " the wrapped model. It works on one GPU, where nothing wraps the model.",
            ranks=ranks_of([record]),
            location=frame.location() if frame else None,
            confidence=0.7,
            evidence=[item.id],
            fix=f"Read it from the wrapped model: `model.module.{attribute}` (accelerate:"
            f" `accelerator.unwrap_model(model).{attribute}`), or keep a reference to the bare"
            " model before wrapping it and call its own attributes and methods on that.",
            confirm=f"the failing line reads `.{attribute}` on the object that was wrapped",
        )
        return


def _read_module_of_bare_model(item: str, record: TracebackRecord, model: str) -> Finding:
    """`.module` exists only on the wrapper: code that assumes DDP ran on a bare model."""
    frame = record.user_frame
    return Finding(
        title=f"the code read `.module` from a {model} that no DDP wrapper holds",
        summary=f"`{record.exception}: {record.message[:160]}`: `.module` is the wrapped model"
        " inside DistributedDataParallel or DataParallel; this model was not wrapped (a"
        " one-process run, a launch that skipped wrapping it, or a model unwrapped already).",
        ranks=ranks_of([record]),
        location=frame.location() if frame else None,
        confidence=0.6,
        evidence=[item],
        fix="Unwrap only what is wrapped: `getattr(model, 'module', model)` (accelerate:"
        " `accelerator.unwrap_model(model)`), or wrap the model the same way in every launch,"
        " one process included.",
        confirm="the failing line reads `.module` of a model that was not wrapped in this run",
    )
