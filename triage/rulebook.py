"""Rules: one cause ID, one detector, one doc in fixed sections.

A rule is a function from the gathered evidence to findings, registered with
`@rule`. Its docstring is its documentation (`triage rules list` prints it) and
must carry the sections below, so every rule explains itself the same way.
"""

from __future__ import annotations

import fnmatch
import inspect
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from triage.models import Evidence, Finding
from triage.taxonomy import is_cause

DOC_SECTIONS = (
    "What it detects",
    "Why it happens",
    "Evidence",
    "Fix",
    "Known false positives",
    "References",
)

P = TypeVar("P", bound=BaseModel)
T = TypeVar("T")


class EvidenceSet:
    """All evidence of one triage, with typed access to the payloads rules read."""

    def __init__(self, items: Iterable[Evidence]) -> None:
        self.items = list(items)
        self._memo: dict[object, Any] = {}

    def of_kind(self, kind: str) -> list[Evidence]:
        return [e for e in self.items if e.kind == kind]

    def payloads(self, kind: str, model: type[P]) -> list[tuple[Evidence, P]]:
        """Parsed once per set: every rule reads the same thousands of stacks."""
        return self.derived(
            (kind, model), lambda: [(e, model.model_validate(e.data)) for e in self.of_kind(kind)]
        )

    def derived(self, key: object, compute: Callable[[], T]) -> T:
        """A view computed once from this evidence and shared by the rules that need it."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])


Detector = Callable[[EvidenceSet], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    cause_id: str
    detect: Detector
    doc: dict[str, str]

    @property
    def title(self) -> str:
        return self.doc.get("title", self.id)


RULES: dict[str, Rule] = {}


def parse_doc(text: str) -> dict[str, str]:
    """Split a rule docstring into its title line and its named sections."""
    lines = inspect.cleandoc(text).splitlines()
    doc = {"title": lines[0].strip() if lines else ""}
    current = None
    pattern = re.compile(rf"^({'|'.join(map(re.escape, DOC_SECTIONS))}):\s*$")
    for line in lines[1:]:
        match = pattern.match(line.strip())
        if match:
            current = match.group(1)
            doc[current] = ""
        elif current:
            doc[current] = (doc[current] + "\n" + line.strip()).strip()
    return doc


def rule(rule_id: str, cause_id: str) -> Callable[[Detector], Detector]:
    """Register a detector; its docstring must hold every section of DOC_SECTIONS."""

    def decorate(detect: Detector) -> Detector:
        if not is_cause(cause_id):
            raise ValueError(f"rule {rule_id}: unknown cause ID {cause_id!r}")
        doc = parse_doc(detect.__doc__ or "")
        missing = [s for s in DOC_SECTIONS if s not in doc]
        if missing:
            raise ValueError(f"rule {rule_id}: doc lacks sections {missing}")
        if rule_id in RULES and RULES[rule_id].detect is not detect:
            raise ValueError(f"rule {rule_id} is registered twice")
        RULES[rule_id] = Rule(rule_id, cause_id, detect, doc)
        return detect

    return decorate


def select(patterns: Iterable[str]) -> list[Rule]:
    """Rules whose cause ID matches any glob, e.g. `hang.*`."""
    patterns = list(patterns)
    return [
        r
        for r in sorted(RULES.values(), key=lambda r: r.id)
        if any(fnmatch.fnmatchcase(r.cause_id, p) for p in patterns)
    ]


def run_rules(rules: Iterable[Rule], evidence: EvidenceSet) -> Iterator[tuple[Rule, Finding]]:
    for r in rules:
        for finding in r.detect(evidence):
            yield r, finding
