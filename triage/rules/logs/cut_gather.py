"""oom.collective_peak from logs, as a last resort: a traceback cut off inside a gather."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, tracebacks
from triage.rules.memory.collective_peak import FIX

#: Functions that gather: torch's all_gather family, FSDP's unshard and its full state
#: dict hooks, DeepSpeed's parameter fetch, and the wrappers frameworks name after them
#: (Lightning's strategy.all_gather).
_GATHERS = re.compile(r"gather|unshard|fetch_sub_module|full_\w*state_dict", re.IGNORECASE)
#: How many innermost frames are read for the gather.
_INNER = 3


@rule("logs.cut_gather", "oom.collective_peak", last_resort=True)
def cut_gather(evidence: EvidenceSet) -> Iterator[Finding]:
    """A traceback stops inside a gather, before its exception line, and nothing else fires.

    What it detects:
    A `Traceback (most recent call last):` whose last lines are frames (the paste was cut
    before the exception) with a gathering function among its innermost frames.

    Why it happens:
    A gather's output is the world size times its input on every rank (an epoch's
    per-batch tensors gathered at its end, a ZeRO-3 or FSDP layer unsharded at once), so the
    failure raised there is most often the memory it allocates; an NCCL error or a timeout
    in the gather is the alternative, and only the exception line tells them apart.

    Evidence:
    The cut traceback and its gathering frame.

    Fix:
    Gather less at a time (move accumulated tensors to the CPU or reduce them before the
    gather, unshard fewer layers at once), after reading the exception line the paste lost.

    Known false positives:
    A gather that failed with a communication error or timed out; any text whose exception
    line was cut for another reason. It stands only when no other rule finds anything.

    References:
    https://pytorch.org/docs/stable/distributed.html#torch.distributed.all_gather
    """
    found = tracebacks(evidence, dumps=False)
    if any(record.exception is not None for _, record in found):
        return
    for item, record in found:
        frame = next((f for f in record.frames[:_INNER] if _GATHERS.search(f.function)), None)
        if frame is None:
            continue
        user = record.user_frame or frame
        yield Finding(
            title=f"a traceback stops inside {frame.function}, its exception line cut off",
            summary=f"The traceback stops in {frame.function} ({frame.file.rsplit('/', 1)[-1]}"
            f":{frame.line}) before its exception: a gather allocates the world size times its"
            " input on every rank, so running out of memory there is the likely failure; an"
            " NCCL error or a timeout in the gather is the other, and the line after the last"
            " frame says which.",
            ranks=ranks_of([record]),
            location=user.location(),
            confidence=0.15,
            evidence=[item.id],
            fix=FIX,
            confirm="the exception line after the last frame: `CUDA out of memory` (this), or"
            " an NCCL error or watchdog timeout (a communication failure)",
        )
        return
