"""config.unknown from logs: code read a model's attribute through the DDP wrapper."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, tracebacks

#: nn.Module.__getattr__'s wording for a wrapper that does not forward attribute reads to the
#: module it wraps (FSDP and DeepSpeed's engine forward them; these two do not).
_WRAPPER = re.compile(
    r"'(?P<wrapper>DistributedDataParallel|DataParallel)' object has no attribute"
    r" '(?P<attribute>\w+)'"
)


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

    Known false positives:
    An attribute the model itself does not have either (a typo): the wrapper's name is then
    in the message all the same, and unwrapping moves the error one line further.

    References:
    https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """
    for item, record in tracebacks(evidence, dumps=False):
        if record.exception != "AttributeError":
            continue
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
