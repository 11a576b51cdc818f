"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.nccl_env_override/forced_everywhere/record.py [OUTPUT]

A two-rank gloo job launched with NCCL_ALGO=Tree and NCCL_PROTO=LL128 on every rank (settings
copied from another cluster's launch script).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import GLOO_JOB, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, GLOO_JOB, 2, every_rank={"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"})
