"""Write evidence.json into the stack rules' cases: the recorded py-spy dumps of real hung
gloo jobs (tests/fixtures/stacks/<scenario>, recorded by tests/fixtures/stacks/record.py),
replayed into Evidence items exactly as tests/test_hang_fixtures.py::replay does.

    .venv/bin/python tests/rules/replay_stacks.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from tests.test_hang_fixtures import FIXTURES, replay  # noqa: E402

#: case folder -> the recorded scenario it replays
CASES = {
    "stacks.mismatched_collective/pyspy": "mismatched_collective",
    "stacks.p2p_deadlock/p2p_deadlock": "p2p_deadlock",
    "stacks.rank_not_in_collective/rank_not_in_collective": "rank_not_in_collective",
    "stacks.subgroup_mismatch/subgroup_mismatch": "subgroup_mismatch",
    "stacks.uneven_inputs/uneven_inputs": "uneven_inputs",
}


def main() -> None:
    for case, scenario in CASES.items():
        _, report = replay(FIXTURES / scenario)
        items = [item.model_dump(mode="json") for item in report.evidence]
        (HERE / case / "evidence.json").write_text(json.dumps(items, indent=1) + "\n")


if __name__ == "__main__":
    main()
