"""Record the evidence of this case from a real job.

    .venv/bin/python tests/rules/logs.rank_crashed/segfault_under_torchrun/record.py

Runs job.py under torchrun (2 CPU gloo ranks, --tee 3) and keeps its console output
(console.log), the temporary folder's path replaced by a stable one. Rank 1 dies of
SIGSEGV with nothing of its own on stderr; torchrun reports its exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
STABLE = "/tmp/triage-rank_crashed"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="triage-rank-crashed-") as tmp:
        console = Path(tmp) / "console.log"
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--standalone", "--tee", "3", str(HERE / "job.py"),
        ]  # fmt: skip
        with console.open("w") as out:
            proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                proc.wait(timeout=120)
            finally:
                if proc.poll() is None:  # never leave the job's processes behind
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        text = console.read_text()
        if "exitcode: -11" not in text:
            sys.exit("torchrun never reported rank 1's SIGSEGV; nothing saved")
        (HERE / "console.log").write_text(text.replace(tmp, STABLE))
        print(f"recorded into {HERE}")


if __name__ == "__main__":
    main()
