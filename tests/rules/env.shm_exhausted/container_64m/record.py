"""Record this case's environment evidence from real processes.

    .venv/bin/python tests/rules/env.shm_exhausted/container_64m/record.py

A two-rank gloo job in a container-like mount namespace (unshare --mount) whose /dev/shm is
a 64 MB tmpfs, docker's default, while the host's is large. Needs root and unshare.

The ranks are started as separate processes (a hand-rolled launcher's way), each with a
clean environment plus the variables below. Once every rank has started (it prints `ready`)
and had a moment to reach init_process_group, the registered `check_environment` tool reads
their pids, as `triage` does for a live job; its evidence is saved to evidence.json
(model_dump(mode="json")). Every process started here is killed and reaped at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO))

from triage.plugins import load_all  # noqa: E402
from triage.registry import REGISTRY  # noqa: E402

#: A rank: a small torch gloo job: env:// init_process_group, a barrier, then it idles like a training loop.
JOB = """import time
from datetime import timedelta

import torch.distributed as dist

print('ready', flush=True)
dist.init_process_group('gloo', timeout=timedelta(seconds=300))
dist.barrier()
time.sleep(300)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env() -> dict[str, str]:
    """This shell's environment without anything a launcher, NCCL or gloo would read."""
    drop = ("NCCL_", "GLOO_", "TORCH", "CUDA_", "SLURM_", "OMPI_", "PMI_", "LD_PRELOAD")
    launcher = (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    )
    return {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in launcher}


def ranks(port: int) -> list[dict[str, str]]:
    """The variables each rank is started with."""
    return [
        {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        },
        {
            "RANK": "1",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        },
    ]


PREFIX: list[str] = [
    "unshare",
    "--mount",
    "sh",
    "-c",
    'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" "$@"',
]
SETTLE_S = 3


def main() -> None:
    load_all()
    port = free_port()
    procs: list[subprocess.Popen[str]] = []
    try:
        for extra in ranks(port):
            proc = subprocess.Popen(
                [*PREFIX, sys.executable, "-c", JOB],
                env=clean_env() | extra,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(SETTLE_S)
        assert all(p.poll() is None for p in procs), "a rank exited before it was read"
        run = REGISTRY.run("check_environment", {"pids": [p.pid for p in procs]})
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    items = [e.model_dump(mode="json") for e in run.evidence]
    (HERE / "evidence.json").write_text(json.dumps(items, indent=2) + "\n")
    for item in run.evidence:
        print(item.summary)
    for gap in run.gaps:
        print("gap:", gap.reason)


if __name__ == "__main__":
    main()
