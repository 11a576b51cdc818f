"""config.unknown from logs: DistributedDataParallel asked to wrap a module with nothing to
train."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._signals import ids, ranks_of, signals

_REFUSED = re.compile("is not needed when a module")


@rule("logs.ddp_frozen_module", "config.unknown")
def ddp_frozen_module(evidence: EvidenceSet) -> Iterator[Finding]:
    """DistributedDataParallel refused a module whose parameters are all frozen.

    What it detects:
    `DistributedDataParallel is not needed when a module doesn't have any parameter that
    requires a gradient`: DDP synchronises gradients, and this module has none.

    Why it happens:
    A frozen module (a teacher, a reference or reward model in RL fine-tuning, a VAE or text
    encoder beside the trained network) is wrapped like the trained one, or the module was
    frozen (requires_grad_(False), a LoRA setup that froze everything) before wrapping.

    Evidence:
    DDP's error and the user line that wrapped the module.

    Fix:
    Wrap only the modules that train; keep a frozen one as it is, on the rank's GPU, in eval
    mode; check that the parameters meant to train still require gradients.

    Known false positives:
    None known: DDP raises it for this reason only.

    References:
    https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """
    found = signals(evidence, "setup.ddp_nothing_to_train")
    if not found:
        return
    ranks = ranks_of(s for _, s in found)
    yield Finding(
        title="DistributedDataParallel was asked to wrap a module with nothing to train",
        summary=f"`{found[0][1].text.strip()[:160]}`: every parameter of the module is frozen,"
        " so there are no gradients for DDP to synchronise.",
        ranks=ranks,
        location=comm_view(evidence).location(ranks, _REFUSED),
        confidence=0.7,
        evidence=ids(found)[:8],
        fix="Wrap only the modules that train: keep a frozen one (a teacher, a reference or reward"
        " model, an encoder) unwrapped on the rank's GPU in eval mode, and check that the"
        " parameters meant to train still require gradients (a LoRA or freezing step that froze"
        " everything).",
        confirm="sum(p.requires_grad for p in module.parameters()) is 0 for the module wrapped",
    )
