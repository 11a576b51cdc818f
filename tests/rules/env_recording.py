"""Shared recorder for the `env.*` rule fixtures' evidence from real processes.

Each `tests/rules/env.<rule>/<case>/record.py` states only its case (the job its ranks run,
the variables each rank is started with, any wrapper such as a container-like namespace)
and calls `main`:

    .venv/bin/python tests/rules/env.<rule>/<case>/record.py [OUTPUT]

The ranks are started as separate processes (a hand-rolled launcher's way), each with a
clean environment plus the case's variables. Once every rank has started (it prints `ready`)
and had a moment to reach init_process_group, the registered `check_environment` tool reads
their pids, as `triage` does for a live job; its evidence is saved to OUTPUT, by default the
case folder's evidence.json (model_dump(mode="json")). Every process started here is killed
and reaped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# What a launcher sets (RANK ... MASTER_PORT), as the live check_environment tests plant it.
from tests.test_environment import LAUNCHER_VARS
from triage.plugins import load_all
from triage.registry import REGISTRY, ToolRun
from triage.scenarios.harness import free_port

#: A rank: a small torch gloo job: env:// init_process_group, a barrier, then it idles like
#: a training loop.
GLOO_JOB = """import time
from datetime import timedelta

import torch.distributed as dist

print('ready', flush=True)
dist.init_process_group('gloo', timeout=timedelta(seconds=300))
dist.barrier()
time.sleep(300)
"""

#: A rank: a process that has started and not yet called init_process_group (still loading
#: its data).
LOADING_JOB = """import time
print('ready', flush=True)
time.sleep(300)
"""

#: How long the ranks get, after all printed `ready`, to reach init_process_group.
SETTLE_S = 3.0


def clean_env() -> dict[str, str]:
    """This shell's environment without anything a launcher, NCCL or gloo would read.

    The recorded facts must come from the case's variables only, not from the shell that ran
    the recorder.
    """
    drop = ("NCCL_", "GLOO_", "TORCH", "CUDA_", "SLURM_", "OMPI_", "PMI_", "LD_PRELOAD")
    return {
        k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in LAUNCHER_VARS
    }


def container(*namespaces: str) -> list[str]:
    """A command prefix that runs a rank in a container-like namespace of its own. Needs root.

    `unshare --mount` plus `namespaces` (e.g. "--net": a private network with only `lo`), with
    a 64 MB tmpfs, docker's default, mounted on /dev/shm before the rank's command is exec'd.
    """
    mount_shm = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" "$@"'
    return ["unshare", "--mount", *namespaces, "sh", "-c", mount_shm]


def rank_envs(
    world_size: int,
    port: int,
    master_addr: str | None = "127.0.0.1",
    every_rank: Mapping[str, str] | None = None,
    on_rank: Mapping[int, Mapping[str, str]] | None = None,
) -> list[dict[str, str]]:
    """The variables each rank is started with, as a single-node launcher exports them.

    RANK and LOCAL_RANK are the rank's index, WORLD_SIZE and LOCAL_WORLD_SIZE the rank count,
    MASTER_PORT `port`; MASTER_ADDR is left out when `master_addr` is None. `every_rank` is
    added on all ranks, then `on_rank[r]` on rank r (it may override a launcher variable).
    """
    address = {} if master_addr is None else {"MASTER_ADDR": master_addr}
    on_rank = on_rank or {}
    return [
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            **address,
            "MASTER_PORT": str(port),
            **(every_rank or {}),
            **on_rank.get(rank, {}),
        }
        for rank in range(world_size)
    ]


def read_ranks(envs: Sequence[Mapping[str, str]], job: str, prefix: Sequence[str] = ()) -> ToolRun:
    """Start one process per rank, read them with `check_environment`, then kill them all.

    `prefix` wraps each rank's command line (e.g. unshare for a container-like namespace).
    The processes are killed and reaped even when starting or reading them fails, so a
    recorder never leaves a rank behind.
    """
    load_all()
    procs: list[subprocess.Popen[str]] = []
    try:
        for extra in envs:
            proc = subprocess.Popen(
                [*prefix, sys.executable, "-c", job],
                env={**clean_env(), **extra},
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(SETTLE_S)
        assert all(p.poll() is None for p in procs), "a rank exited before it was read"
        return REGISTRY.run("check_environment", {"pids": [p.pid for p in procs]})
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def save(run: ToolRun, output: Path) -> None:
    """Write the run's Evidence items as the tests read them back, and show what was read."""
    items = [e.model_dump(mode="json") for e in run.evidence]
    output.write_text(json.dumps(items, indent=2) + "\n")
    for item in run.evidence:
        print(item.summary)
    for gap in run.gaps:
        print("gap:", gap.reason)


def main(
    case: Path,
    job: str,
    world_size: int,
    *,
    master_addr: str | None = "127.0.0.1",
    every_rank: Mapping[str, str] | None = None,
    on_rank: Mapping[int, Mapping[str, str]] | None = None,
    prefix: Sequence[str] = (),
    argv: Sequence[str] | None = None,
) -> None:
    """A recorder's entry point: record `case` (its folder) into OUTPUT, the first argument.

    The ranks run `job` with `rank_envs`' variables (a fresh MASTER_PORT, so that no other job
    is met) under `prefix`. OUTPUT, by default the case's evidence.json, lets the shared code
    be tried without touching the committed evidence.
    """
    parser = argparse.ArgumentParser(description=f"Record {case.name}'s environment evidence.")
    parser.add_argument(
        "output",
        nargs="?",
        type=Path,
        default=case / "evidence.json",
        help="where to write the Evidence items (default: the case folder's evidence.json)",
    )
    args = parser.parse_args(argv)
    envs = rank_envs(world_size, free_port(), master_addr, every_rank, on_rank)
    save(read_ranks(envs, job, prefix), args.output)
