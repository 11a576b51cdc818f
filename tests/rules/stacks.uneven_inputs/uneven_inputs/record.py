"""Write evidence.json beside this file: the recorded py-spy dumps of a real hung gloo job,
replayed into triage Evidence items exactly as tests/test_hang_fixtures.py::replay does.

    .venv/bin/python tests/rules/stacks.uneven_inputs/uneven_inputs/record.py

Source: tests/fixtures/stacks/uneven_inputs (recorded by tests/fixtures/stacks/record.py from
triage/scenarios/jobs/uneven_inputs.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.test_hang_fixtures import FIXTURES, replay  # noqa: E402

if __name__ == "__main__":
    _, report = replay(FIXTURES / "uneven_inputs")
    items = [item.model_dump(mode="json") for item in report.evidence]
    (HERE / "evidence.json").write_text(json.dumps(items, indent=1) + "\n")
