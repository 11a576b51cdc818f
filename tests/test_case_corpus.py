"""The evaluation corpus (`tests/cases/<category>/<id>.json`) is well formed: real cases
from public threads, each with its settled cause from the taxonomy and its split.

The cases are scored by `bench/eval_cases.py`, not here: a test must not read the `check`
split's verdicts, and rules must not be written from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, field_validator

from tests.conftest import REPO
from triage.taxonomy import CAUSES

CORPUS = REPO / "tests" / "cases"
FILES = sorted(CORPUS.rglob("*.json"))


class Case(BaseModel):
    """One public report: its machine output verbatim, and the cause its thread settled."""

    model_config = ConfigDict(extra="forbid")

    id: str
    source: str
    url: str
    category: Literal["hang", "comm", "oom", "wrong", "config"]
    cause: str
    accept: list[str]
    certain: bool
    evidence: str
    context: str
    root_cause: str
    fix: str
    split: Literal["dev", "check"]
    #: what the reporter saw, labelled from the report's words and output without its cause
    symptom: Literal["hang", "oom", "wrong-results", "error"]

    @field_validator("cause")
    @classmethod
    def _known(cls, cause: str) -> str:
        assert cause in CAUSES, f"unknown cause {cause}"
        return cause

    @field_validator("accept")
    @classmethod
    def _all_known(cls, accept: list[str]) -> list[str]:
        assert set(accept) <= set(CAUSES), f"unknown causes {set(accept) - set(CAUSES)}"
        return accept


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_case_is_well_formed(path: Path) -> None:
    case = Case.model_validate(json.loads(path.read_text(encoding="utf-8")))
    assert path.stem == case.id and path.parent.name == case.category
    assert case.cause.split(".")[0] == case.category
    assert case.evidence.strip(), "no machine output"
    assert case.cause not in case.accept


def test_ids_and_threads_are_unique() -> None:
    cases = [json.loads(p.read_text(encoding="utf-8")) for p in FILES]
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    threads = [c["source"] for c in cases]
    assert sorted({t for t in threads if threads.count(t) > 1}) == []
