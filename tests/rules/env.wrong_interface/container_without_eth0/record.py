"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.wrong_interface/container_without_eth0/record.py [OUTPUT]

Two ranks in a container-like namespace of their own (unshare --mount --net: a private
network with only `lo`, a 64 MB /dev/shm), started with NCCL_SOCKET_IFNAME=eth0, which the
host has and their network does not. Needs root and unshare.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import LOADING_JOB, container, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, LOADING_JOB, 2, every_rank={"NCCL_SOCKET_IFNAME": "eth0"}, prefix=container("--net"))
