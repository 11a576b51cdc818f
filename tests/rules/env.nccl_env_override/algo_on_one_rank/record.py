"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.nccl_env_override/algo_on_one_rank/record.py [OUTPUT]

A three-rank gloo job whose rank 2 was started from another node's launch script that
exports NCCL_ALGO=Tree; ranks 0 and 1 have no NCCL override.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import GLOO_JOB, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, GLOO_JOB, 3, on_rank={2: {"NCCL_ALGO": "Tree"}})
