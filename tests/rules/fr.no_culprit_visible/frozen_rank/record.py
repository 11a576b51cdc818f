"""Record real Flight Recorder dumps of a 4-rank gloo job that stalls below Python.

    .venv/bin/python tests/rules/fr.no_culprit_visible/frozen_rank/record.py

The job is the training loop of tests/fixtures/flight_recorder/record.py (gradient all_reduce
per parameter). At step 3 rank 3 enters the first gradient all_reduce at once while ranks 0-2
take longer to get there. Once rank 3 waits in it, it dumps its recorder (torch's own
`_dump_fr_trace`) and the launcher freezes its process with SIGSTOP, as a hung host or GPU
would freeze it. Ranks 0-2 then enter the same all_reduce and block on the frozen peer; the
launcher has them dump too. Every dump shows the same all_reduce, unfinished, on every rank:
the stall is below the collective calls. Writes node07_rank{0..3}.pickle beside this file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORLD = 4
FAULT_STEP = 3
FROZEN = 3
ARMED = "FR-RECORD: armed"
DUMPED = "FR-RECORD: dumped"
HOST = "node07"
LATE_S = 6.0  # how much later ranks 0-2 reach the all_reduce at the fault step


def _dump_on_trigger(rank: int, trigger: Path) -> None:
    import torch

    while not trigger.exists():
        time.sleep(0.05)
    (HERE / f"{HOST}_rank{rank}.pickle").write_bytes(
        torch._C._distributed_c10d._dump_fr_trace(True, True, False)
    )
    print(DUMPED, flush=True)
    if rank != FROZEN:
        os._exit(0)


def job(scratch: Path) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10):
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if step == FAULT_STEP:
            trigger = scratch / f"dump-rank{rank}"
            threading.Thread(target=_dump_on_trigger, args=(rank, trigger), daemon=True).start()
            print(ARMED, flush=True)
            if rank != FROZEN:
                time.sleep(LATE_S)
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)  # fr: gradients
        opt.step()
    dist.barrier()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if text in line:
            return
    raise RuntimeError(f"rank exited before printing {text!r}")


def record() -> None:
    for old in HERE.glob("*.pickle"):
        old.unlink()
    scratch = Path(tempfile.mkdtemp(prefix="fr-frozen-"))
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(WORLD),
        TORCH_FR_BUFFER_SIZE="2000",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--job", str(scratch)],
            env=dict(env, RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for rank in range(WORLD)
    ]
    try:
        for proc in procs:
            _wait_for(proc, ARMED)
        started = time.monotonic()  # the ranks run in step: they all armed about now
        time.sleep(1)  # rank 3 waits in the all_reduce; the others are still on their way
        (scratch / f"dump-rank{FROZEN}").touch()
        _wait_for(procs[FROZEN], DUMPED)
        os.kill(procs[FROZEN].pid, signal.SIGSTOP)
        if time.monotonic() - started > LATE_S - 2:
            raise RuntimeError("rank 3 froze too late: the all_reduce may have completed")
        time.sleep(LATE_S + 3)  # ranks 0-2 block in the all_reduce on the frozen rank
        for rank in range(WORLD):
            if rank != FROZEN:
                (scratch / f"dump-rank{rank}").touch()
        for rank, proc in enumerate(procs):
            if rank != FROZEN:
                output = proc.communicate(timeout=60)[0]
                if DUMPED not in output:
                    raise RuntimeError(f"rank {rank} did not dump:\n{output}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print(f"recorded {sorted(p.name for p in HERE.glob('*.pickle'))}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--job"]:
        job(Path(sys.argv[2]))
    else:
        record()
