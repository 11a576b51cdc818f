"""Record the evidence of this case from a real job.

    .venv/bin/python tests/rules/logs.wrong_markers/replicas_not_close/record.py

Runs job.py under torchrun (2 CPU gloo ranks, --tee 3) and keeps its console output
(console.log), the checkout path replaced by /src/triage: each rank's AssertionError from torch.testing.assert_close on replicas
that were initialised with different seeds.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.torchrun_recording import record_console  # noqa: E402

if __name__ == "__main__":
    record_console(HERE)
