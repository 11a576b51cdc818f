"""Record the evidence of this case from a real job.

    .venv/bin/python tests/rules/logs.wrong_markers/replicas_not_close/record.py

Runs job.py under torchrun (2 CPU gloo ranks, --tee 3) and keeps its console output
(console.log), the checkout path replaced by /src/triage: each rank's AssertionError from torch.testing.assert_close on replicas
that were initialised with different seeds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
        "--tee", "3", str(HERE / "job.py"),
    ]  # fmt: skip
    with open(HERE / "console.log", "w") as console:
        subprocess.run(command, stdout=console, stderr=subprocess.STDOUT, timeout=120, check=False)
    log = HERE / "console.log"
    log.write_text(log.read_text().replace(str(HERE.parents[2]) + "/", "/src/triage/"))
