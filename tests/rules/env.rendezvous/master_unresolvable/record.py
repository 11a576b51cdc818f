"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.rendezvous/master_unresolvable/record.py [OUTPUT]

A two-rank gloo job whose MASTER_ADDR, trainer-master.invalid, resolves to nothing (a host name
from another cluster); the ranks wait in init_process_group and are read while they wait.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import GLOO_JOB, main  # noqa: E402

if __name__ == "__main__":
    main(HERE, GLOO_JOB, 2, master_addr="trainer-master.invalid")
