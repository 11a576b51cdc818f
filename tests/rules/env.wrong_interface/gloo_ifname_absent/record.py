"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.wrong_interface/gloo_ifname_absent/record.py [OUTPUT]

Two ranks started with GLOO_SOCKET_IFNAME=ib0 (copied from an InfiniBand cluster) on a host
whose interfaces are lo and eth0; they are read before init_process_group, where gloo
would fail with `Unable to find address for: ib0`.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import LOADING_JOB, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, LOADING_JOB, 2, every_rank={"GLOO_SOCKET_IFNAME": "ib0"})
