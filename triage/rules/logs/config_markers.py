"""config.unknown from logs: the first exception is about the job's distributed setup."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, tracebacks

#: Words of a distributed setup: launcher variables, process-group setup, devices, sizes.
#: The variables' names count in capitals only: "rank" is a word of many messages.
_SETUP = re.compile(
    r"\b(?:MASTER_ADDR|MASTER_PORT|LOCAL_RANK|WORLD_SIZE|RANK)\b|"
    r"(?i:environment variable|init_process_group|device ordinal|parallel[ _]size|"
    r"world[ _]size|process group)"
)


@rule("logs.config_markers", "config.unknown")
def config_markers(evidence: EvidenceSet) -> Iterator[Finding]:
    """The first exception is about the distributed setup, in words no config rule reads.

    What it detects:
    A Python traceback whose exception names the setup: a launcher variable (RANK,
    LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT), init_process_group, a process group, a device
    ordinal, a parallel or world size; as the first exception of the text.

    Why it happens:
    The job's launch and its code disagree: a variable the launcher did not set, a device
    the host does not have, a checkpoint or mesh laid out for another world size.

    Evidence:
    The first traceback's exception type and message, and its innermost user frame.

    Fix:
    Read the exception against the launch command: which launcher set which variables,
    how many processes per node for how many GPUs, and the sizes the checkpoint or mesh
    was made for.

    Known false positives:
    An exception that only mentions these words; a rule that names the cause outranks it.

    References:
    https://pytorch.org/docs/stable/elastic/run.html#environment-variables
    """
    errors = [(e, t) for e, t in tracebacks(evidence, dumps=False) if t.exception]
    if not errors:
        return
    item, first = errors[0]
    text = f"{first.exception}: {first.message}"
    if not _SETUP.search(text):
        return
    frame = first.user_frame
    yield Finding(
        title=f"the job's setup failed: {text[:120]}",
        summary=f"The first exception is about the distributed setup: `{text[:200]}`.",
        ranks=ranks_of([first]),
        location=frame.location() if frame else None,
        confidence=0.2,
        evidence=[item.id],
        fix="Read the exception against the launch command: which launcher set which"
        " variables, how many processes per node for how many GPUs, and the sizes the"
        " checkpoint or mesh was made for.",
        confirm="the launch command and the script disagree on what the exception names",
    )
