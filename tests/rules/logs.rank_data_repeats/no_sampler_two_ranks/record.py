"""Record the evidence of this case from a real job.

    .venv/bin/python tests/rules/logs.rank_data_repeats/no_sampler_two_ranks/record.py

Runs job.py under torchrun (2 CPU gloo ranks, --tee 3) and keeps its console output
(console.log), the checkout path replaced by /src/triage: each rank's first two batches, identical on both ranks (a shuffling DataLoader seeded alike, no DistributedSampler).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.torchrun_recording import record_console  # noqa: E402

if __name__ == "__main__":
    record_console(HERE)
