"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.device_assignment/one_gpu_for_all_ranks/record.py [OUTPUT]

A two-rank gloo job whose launch script exports CUDA_VISIBLE_DEVICES=0 once for the whole
node, so LOCAL_RANK 0 and 1 both see only GPU 0 (with cuda:LOCAL_RANK, rank 1 would get an
invalid ordinal; with cuda:0 both share one GPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import GLOO_JOB, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, GLOO_JOB, 2, every_rank={"CUDA_VISIBLE_DEVICES": "0"})
