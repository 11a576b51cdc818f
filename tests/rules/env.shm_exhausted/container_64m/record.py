"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.shm_exhausted/container_64m/record.py [OUTPUT]

A two-rank gloo job in a container-like mount namespace (unshare --mount) whose /dev/shm is
a 64 MB tmpfs, docker's default, while the host's is large. Needs root and unshare.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import GLOO_JOB, container, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, GLOO_JOB, 2, prefix=container())
