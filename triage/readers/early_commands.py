"""Host queries the console script starts before the CLI's import, for readers to take
over; stdlib only.

nvidia-smi answers in tens of milliseconds on an idle host and in up to a second on a busy
8-GPU node (each call loads NVML anew), and a live `triage hang` asks it three things one
after the other. None of that needs the CLI: started with the py-spy dumps, the queries
run beside the import, and `host_facts` takes their answers when it gets to them. Their
output goes to in-memory files as the early dumps' does (`pyspy.EarlyDump`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading

from triage.readers.pyspy import EarlyDump

#: What the environment check asks nvidia-smi: GPUs, the processes holding their memory,
#: the topology matrix.
SMI_QUERIES: tuple[tuple[str, ...], ...] = (
    ("--query-gpu=index,name,pci.bus_id,memory.used,memory.total", "--format=csv,noheader,nounits"),
    (
        "--query-compute-apps=pid,gpu_bus_id,used_memory,process_name",
        "--format=csv,noheader,nounits",
    ),
    ("topo", "-m"),
)

#: Commands started early, by their full argv.
_started: dict[tuple[str, ...], EarlyDump] = {}
_starting: threading.Thread | None = None


def start_smi_queries() -> None:
    """Start SMI_QUERIES against the nvidia-smi on PATH, from a thread (each start is a
    fork and an exec); nothing on a host without it."""
    binary = shutil.which("nvidia-smi")
    if binary is None or not hasattr(os, "memfd_create"):
        return
    global _starting
    _starting = threading.Thread(
        target=_start_all, args=([(binary, *query) for query in SMI_QUERIES],), daemon=True
    )
    _starting.start()


def _start_all(commands: list[tuple[str, ...]]) -> None:
    for argv in commands:
        try:
            output = os.memfd_create("early-command")
        except OSError:  # out of descriptors: the environment check asks on its own
            return
        try:
            process = subprocess.Popen(
                argv, stdout=output, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
            )
        except OSError:
            os.close(output)
            return
        _started[argv] = EarlyDump(process, output)


def take(argv: tuple[str, ...], timeout_s: float) -> tuple[int, str] | None:
    """The exit status and stdout of `argv` if it was started early (once), waiting up to
    `timeout_s` for it; None when it was not started, or did not end in time (then it is
    stopped: it is our own query, not the user's job)."""
    if _starting is not None:
        _starting.join()
    started = _started.pop(argv, None)
    if started is None:
        return None
    try:
        stdout, _ = started.communicate(timeout_s)
    except subprocess.TimeoutExpired:
        _stop(started)
        return None
    return started.process.returncode, stdout


def discard() -> None:
    """Stop and forget what nobody took (a run that never reached the environment check)."""
    if _starting is not None:
        _starting.join()
    while _started:
        _stop(_started.popitem()[1])


def _stop(started: EarlyDump) -> None:
    with contextlib.suppress(OSError):
        started.process.kill()
    started.process.communicate()
    started.close()
