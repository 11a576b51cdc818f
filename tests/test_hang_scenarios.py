"""Real hung gloo jobs, one per cause: `triage hang` must name cause, culprit ranks and line.

Each scenario is a separate-process job (not torchrun, so a dead rank leaves its peers
waiting) with one planted fault marked `# triage: fault` in its script.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import hang_report, requires_torch
from triage.scenarios import CAUSE_IDS, CULPRITS, SCENARIOS, RankJob

pytestmark = [pytest.mark.scenario, requires_torch]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_hang_scenario_names_cause_ranks_and_line(scenario: str) -> None:
    with RankJob(scenario) as job:
        job.wait_until_stalled()
        live = [job.pids[r] for r in job.live_ranks()]
        report = hang_report(live)
        top = report["hypotheses"][0]
        assert top["cause_id"] == CAUSE_IDS[scenario], json.dumps(report["hypotheses"], indent=1)
        assert set(top["ranks"]) == set(CULPRITS[scenario])
        locations = [top["location"], *top["other_locations"]]
        fault = job.marker_line("fault")
        wait = job.marker_line("wait")
        lines = {(loc["file"], loc["line"]) for loc in locations if loc}
        assert (str(job.script), fault) in lines or (
            scenario == "rank_exited" and (str(job.script), wait) in lines
        ), lines
