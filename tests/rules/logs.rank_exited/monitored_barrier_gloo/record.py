"""Record the evidence of this case from a real job.

    .venv/bin/python tests/rules/logs.rank_exited/monitored_barrier_gloo/record.py

Runs job.py under torchrun (3 CPU gloo ranks, TORCH_DISTRIBUTED_DEBUG=DETAIL, --tee 3) and
keeps its console output (console.log) and torchrun's per-rank log folders (logs/), the
temporary folder renamed to a stable path. Rank 1 raises a ValueError after the first
all_reduce; rank 0's wrapper reports it in monitoredBarrier before torchrun stops the
others, which the run is repeated for (up to 3 times) when torchrun is faster.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
STABLE = "/tmp/triage-rank_exited"
WANTED = "failed to pass monitoredBarrier"


def run_once(out: Path) -> str:
    env = dict(os.environ, TORCH_DISTRIBUTED_DEBUG="DETAIL")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--standalone",
        "--redirects", "3", "--tee", "3", "--log-dir", str(out / "logs"), str(HERE / "job.py"),
    ]  # fmt: skip
    with open(out / "console.log", "w") as console:
        proc = subprocess.Popen(
            command, stdout=console, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:  # never leave the job's processes behind
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return (out / "console.log").read_text()


def save(out: Path) -> None:
    for old in (HERE / "console.log", HERE / "logs"):
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        dest = HERE / path.relative_to(out)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(path.read_bytes().replace(str(out).encode(), STABLE.encode()))


def main() -> None:
    for _ in range(3):
        with tempfile.TemporaryDirectory(prefix="triage-rank-exited-") as tmp:
            if WANTED in run_once(Path(tmp)):
                save(Path(tmp))
                print(f"recorded into {HERE}")
                return
    sys.exit(f"rank 0 never reported {WANTED!r}; nothing saved")


if __name__ == "__main__":
    main()
