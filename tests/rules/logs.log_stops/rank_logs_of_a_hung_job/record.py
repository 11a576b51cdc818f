"""Record the evidence of this case from a real job.

    .venv/bin/python tests/rules/logs.log_stops/rank_logs_of_a_hung_job/record.py

Runs job.py under torchrun (2 CPU gloo ranks, each rank's output in its own file under
--log-dir), waits until both ranks have logged step 3 and the logs stop growing, stops the
job (this recorder's own job: it kills its process group) and keeps the two rank logs as
rank0.log and rank1.log, their timestamps as written.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _logs(root: Path) -> list[Path]:
    return sorted(root.glob("*/attempt_0/*/stderr.log"))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="triage-log-stops-") as tmp:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--standalone", "--log-dir", tmp, "--redirects", "3", str(HERE / "job.py"),
        ]  # fmt: skip
        proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 120
            sizes: list[int] = []
            while time.monotonic() < deadline:
                logs = _logs(Path(tmp))
                texts = [log.read_text() for log in logs]
                now = [len(text) for text in texts]
                if len(logs) == 2 and all("step 3" in t for t in texts) and now == sizes:
                    break
                sizes = now
                time.sleep(1)  # the logs' growth is what is polled
            else:
                raise SystemExit("the job's logs never reached step 3")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for log in _logs(Path(tmp)):
            (HERE / f"rank{log.parent.name}.log").write_text(log.read_text())


if __name__ == "__main__":
    main()
