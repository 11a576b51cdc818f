"""Checks that compared the ranks' collectives and refused one (Horovod's coordinator,
torch's DETAIL check, ZeRO's parameter lists, FSDP's forward order, DTensor's and a pipeline
stage's shapes): the shape rule reads the ones about sizes, the mismatched-collective rule
the rest. None of them says which rank is the odd one."""

from __future__ import annotations

from triage.observations import LogSignal
from triage.readers.signatures.hang import MISMATCH_CHECKERS, SIZE_MISMATCHES
from triage.registry import EvidenceSet
from triage.rules.logs._signals import Signal, signals


def refusals(evidence: EvidenceSet, *, sizes: bool) -> list[Signal]:
    """The checks' refusals about sizes (shapes, dtypes), or about the calls themselves."""
    return [
        item
        for item in signals(evidence, *MISMATCH_CHECKERS)
        if (item[1].fields.get("what") in SIZE_MISMATCHES) == sizes
    ]


def refused(line: LogSignal) -> tuple[str, float]:
    """The refusal in the check's own words, and how sure those words are."""
    checker, compared, confidence = MISMATCH_CHECKERS[line.signature]
    said = f"{checker} compared {compared} and refused it: `{line.fields['detail'].strip()}`"
    return f"{said} ({line.path}:{line.line}).", confidence
