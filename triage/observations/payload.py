"""The base of every evidence payload."""

from __future__ import annotations

from typing import ClassVar

from triage.models import Contract


class Payload(Contract):
    """Base of evidence payloads: strict like every contract. A payload that is the `data`
    of an evidence kind names that kind once, in `EVIDENCE_KIND`; tools write it and rules
    read it through the class, never by a string of their own."""

    EVIDENCE_KIND: ClassVar[str] = ""
