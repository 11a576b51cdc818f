"""Every rule fires on real evidence of its own: one folder per rule ID.

`tests/rules/<rule_id>/[<case>/]expected.json` names the rule, its cause, the culprit
ranks and the code location it must report, the evidence to read (`inputs`: files or
folders, relative to the case folder or to the checkout when they start with `tests/`),
optional recorded Evidence items (`evidence`: a JSON list, for live sources such as
py-spy stacks and a rank's environment), a case of the evaluation corpus whose machine
output to read (`case`: a `tests/cases/...json` path, of the `dev` split only: `check`
cases are never used to write or test rules), and where that evidence came from (`origin`).
The evidence is gathered by the intake playbook's tools, as `triage analyze` does, and
every registered rule runs on it; the named rule must be among those that fire.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from triage.engine import gather
from triage.models import Evidence, Finding
from triage.playbooks import get_playbook
from triage.registry import RULES, EvidenceSet, run_rules, select

HERE = Path(__file__).resolve().parent
CASES = sorted(p.parent for p in HERE.rglob("expected.json"))
#: Rules no real evidence can be recorded for on this project's machines, and why.
WITHOUT_REAL_EVIDENCE = {
    "fr.p2p_deadlock": "gloo's Flight Recorder records no send/recv (checked on torch 2.14 with"
    " send/recv, irecv and batch_isend_irecv): only NCCL dumps show p2p waits, and no GPU is"
    " lent here; tests/test_flight_recorder.py covers it on synthetic NCCL-format dumps",
    "env.infiniband": "it reads the host's InfiniBand ports (/sys/class/infiniband) beside each"
    " rank's memlock limit and NCCL_IB_* settings; no host here has an HCA, and a software"
    " RoCE device needs kernel modules these machines lack",
}


def _case_id(case: Path) -> str:
    return str(case.relative_to(HERE))


def _resolve(case: Path, name: str) -> str:
    return str(REPO / name if name.startswith("tests/") else case / name)


def fire(case: Path, scratch: Path) -> tuple[dict[str, Any], list[Finding]]:
    """Gather the case's evidence and run every rule on it; the named rule's findings."""
    expected = json.loads((case / "expected.json").read_text())
    targets = {"paths": [_resolve(case, name) for name in expected.get("inputs", [])]}
    if expected.get("case"):
        public = json.loads((REPO / expected["case"]).read_text())
        assert public["split"] == "dev", "check cases are never used to write or test rules"
        (scratch / "evidence.log").write_text(public["evidence"] + "\n")
        targets["paths"].append(str(scratch / "evidence.log"))
    evidence = gather(get_playbook("analyze"), targets).evidence if targets["paths"] else []
    if expected.get("evidence"):
        recorded = json.loads(Path(_resolve(case, expected["evidence"])).read_text())
        evidence += [Evidence.model_validate(item) for item in recorded]
    found = [
        f for r, f in run_rules(select(["*"]), EvidenceSet(evidence)) if r.id == expected["rule_id"]
    ]
    return expected, found


def test_every_rule_has_a_fixture() -> None:
    covered = {json.loads((case / "expected.json").read_text())["rule_id"] for case in CASES}
    bundled = {r.id for r in RULES.values() if r.detect.__module__.startswith("triage.rules.")}
    assert sorted(bundled - covered - set(WITHOUT_REAL_EVIDENCE)) == [], "no fixture"
    assert sorted(set(WITHOUT_REAL_EVIDENCE) & covered) == [], "has one now: drop the excuse"
    assert set(WITHOUT_REAL_EVIDENCE) <= bundled


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_fires_on_its_fixture(case: Path, tmp_path: Path) -> None:
    expected, found = fire(case, tmp_path)
    assert case.relative_to(HERE).parts[0] == expected["rule_id"], "folder is the rule ID"
    assert expected["rule_id"] in RULES, "no such rule"
    assert expected.get("origin"), "say where the evidence came from"
    assert found, f"{expected['rule_id']} did not fire"
    finding = max(found, key=lambda f: f.confidence)
    assert finding.cause_id == expected["cause_id"]
    if "ranks" in expected:
        assert finding.ranks == expected["ranks"]
    where = expected.get("location")
    if where:
        assert finding.location is not None, "no location reported"
        assert finding.location.file.endswith(where["file"]), finding.location
        if "line" in where:
            assert finding.location.line == where["line"], finding.location
