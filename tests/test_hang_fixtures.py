"""Recorded py-spy dumps of the real scenario jobs, replayed through the rules without torch.

Fixtures come from `tests/fixtures/stacks/record.py`; re-record them when a scenario
script changes (the first test catches drift).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from triage.engine import decide
from triage.models import Evidence, Report
from triage.playbooks import get_playbook
from triage.readers.stacks import classify, frames_from_py_spy, pick_main_thread
from triage.scenarios import RankJob

FIXTURES = REPO / "tests" / "fixtures" / "stacks"
SCENARIO_DIRS = sorted(p.parent for p in FIXTURES.glob("*/meta.json"))


def replay(directory: Path) -> tuple[dict[str, Any], Report]:
    meta = json.loads((directory / "meta.json").read_text())
    script = str(REPO / meta["script"])
    evidence = []
    for rank in meta["live_ranks"]:
        threads = json.loads((directory / f"rank{rank}.locals.json").read_text())
        for thread in threads:  # recorded in another checkout: point frames at this one
            for frame in thread["frames"]:
                if frame["filename"].endswith(meta["script"]):
                    frame["filename"] = script
        main = pick_main_thread(threads)
        assert main is not None
        state = classify(
            frames_from_py_spy(main),
            pid=meta["pids"][rank],
            rank=rank,
            active=bool(main.get("active")),
        )
        evidence.append(
            Evidence(
                id=f"stack:rank{rank}",
                kind="stack",
                source="fixture",
                rank=rank,
                summary=state.describe(),
                data=state.model_dump(mode="json"),
            )
        )
    report = Report(symptom="hang", playbook="hang", evidence=evidence)
    return meta, decide(get_playbook("hang"), report)


def test_fixtures_exist_and_match_their_scripts() -> None:
    assert len(SCENARIO_DIRS) >= 6
    for directory in SCENARIO_DIRS:
        meta = json.loads((directory / "meta.json").read_text())
        job = RankJob(REPO / meta["script"])
        assert {m: job.marker_line(m) for m in meta["markers"]} == meta["markers"], directory.name


@pytest.mark.parametrize("directory", SCENARIO_DIRS, ids=lambda p: p.name)
def test_recorded_hang_yields_cause_and_culprits(directory: Path) -> None:
    meta, report = replay(directory)
    top = report.hypotheses[0]
    if meta["exited_ranks"]:
        pytest.skip("an exited rank is only visible to live discovery (see test_hang_scenarios)")
    assert top.cause_id == meta["cause_id"], [h.title for h in report.hypotheses]
    assert set(top.ranks) == set(meta["culprits"])
    fault = (str(REPO / meta["script"]), meta["markers"]["fault"])
    assert fault in {(loc.file, loc.line) for loc in [top.location, *top.other_locations] if loc}
