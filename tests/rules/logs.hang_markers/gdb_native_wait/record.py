"""Record the evidence of this case from a real job.

    .venv/bin/python tests/rules/logs.hang_markers/gdb_native_wait/record.py

Runs job.py under torchrun (2 CPU gloo ranks), waits until rank 0 says it enters its
all_reduce, and keeps gdb's `thread apply all bt` of rank 0 (gdb.txt): the native frames
of a process waiting in a collective, as people paste them into hang reports (the
checkout path replaced by /src/triage). gdb
attaches for the moment of the backtrace and detaches; the job is stopped afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent


def rank0_pid(launcher: psutil.Process) -> int | None:
    for child in launcher.children(recursive=True):
        if child.environ().get("RANK") == "0":
            return child.pid
    return None


if __name__ == "__main__":
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
        str(HERE / "job.py"),
    ]  # fmt: skip
    job = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        assert job.stdout is not None
        for line in job.stdout:
            if "rank 0 enters all_reduce" in line:
                break
        time.sleep(2)  # let rank 0 reach gloo's wait inside the all_reduce
        pid = rank0_pid(psutil.Process(job.pid))
        assert pid is not None, "rank 0 not found"
        trace = subprocess.run(
            ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        checkout = str(HERE.parents[2]) + "/"
        (HERE / "gdb.txt").write_text(trace.stdout.replace(checkout, "/src/triage/"))
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
