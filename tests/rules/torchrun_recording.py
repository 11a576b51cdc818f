"""Recording a rule's evidence from a real torchrun job: its console output, as users paste it.

A case's record.py calls `record_console(HERE)`: job.py beside it runs under torchrun (2 CPU
gloo ranks, --tee 3), and console.log keeps what the console showed, the checkout's path
replaced by /src/triage so that the file does not change with where the checkout lives.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def record_console(case: Path, nproc: int = 2) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--standalone", "--tee", "3", str(case / "job.py"),
    ]  # fmt: skip
    log = case / "console.log"
    with log.open("w") as console:
        subprocess.run(command, stdout=console, stderr=subprocess.STDOUT, timeout=120, check=False)
    log.write_text(log.read_text().replace(f"{REPO}/", "/src/triage/"))
