"""The cause IDs in code are the ones the design's taxonomy lists: IDs are API."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO
from triage.taxonomy import CAUSES

TAXONOMY = REPO.parent / "shared" / "design" / "taxonomy.md"


@pytest.mark.skipif(not TAXONOMY.exists(), reason="design docs not beside the checkout")
def test_every_documented_cause_id_exists() -> None:
    documented = set(re.findall(r"^\| ([a-z]+\.[a-z0-9_]+) \|", TAXONOMY.read_text(), re.M))
    assert documented, "taxonomy table not found"
    assert documented <= set(CAUSES), sorted(documented - set(CAUSES))


def test_cause_ids_are_family_dot_name() -> None:
    for cause in CAUSES:
        family, _, name = cause.partition(".")
        assert family in {"hang", "comm", "oom", "wrong", "config"} and re.fullmatch(
            r"[a-z0-9_]+", name
        )


#: Causes no rule names, and why: the model may still name them, a person reads them.
WITHOUT_A_RULE: dict[str, str] = {}


def test_every_cause_has_a_rule_or_says_why_not() -> None:
    from triage.registry import RULES

    ruled = {r.cause_id for r in RULES.values()}
    specific = {c for c in CAUSES if not c.endswith(".unknown")}
    assert sorted(specific - ruled - set(WITHOUT_A_RULE)) == []
    assert sorted(set(WITHOUT_A_RULE) & ruled) == [], "it has a rule now: drop the excuse"
