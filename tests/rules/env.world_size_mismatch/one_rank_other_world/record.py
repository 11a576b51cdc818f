"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.world_size_mismatch/one_rank_other_world/record.py [OUTPUT]

A three-rank gloo job in which rank 2's launch line says WORLD_SIZE=4 while ranks 0 and 1
say 3: the job hangs in init_process_group and is read while it waits.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import GLOO_JOB, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, GLOO_JOB, 3, on_rank={2: {"WORLD_SIZE": "4"}})
