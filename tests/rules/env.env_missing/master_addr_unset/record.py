"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.env_missing/master_addr_unset/record.py [OUTPUT]

Two ranks whose launch wrapper exports RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and
MASTER_PORT but forgets MASTER_ADDR; they are read while still loading their data (with
MASTER_ADDR missing, env:// init_process_group would raise at once).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import LOADING_JOB, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, LOADING_JOB, 2, master_addr=None)
