"""Write evidence.json beside this file: the recorded py-spy dumps of a real hung gloo job,
replayed into triage Evidence items exactly as tests/test_hang_fixtures.py::replay does.

    .venv/bin/python tests/rules/stacks.no_culprit_visible/rank_exited_undiscovered/record.py

Source: tests/fixtures/stacks/rank_exited (recorded by tests/fixtures/stacks/record.py from
triage/scenarios/jobs/rank_exited.py).
Only the three live ranks' stacks, without the live process discovery that
would show rank 3 missing: every stack waits in init_process_group.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.test_hang_fixtures import FIXTURES, replay  # noqa: E402

if __name__ == "__main__":
    _, report = replay(FIXTURES / "rank_exited")
    items = [item.model_dump(mode="json") for item in report.evidence]
    (HERE / "evidence.json").write_text(json.dumps(items, indent=1) + "\n")
