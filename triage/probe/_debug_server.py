"""PyTorch's debug server, started in this rank when asked: `install(debug_server_port=PORT)`,
or `$TRIAGE_DEBUG_SERVER_PORT` (what `triage run --debug-server-port` sets) at import.

`torch.distributed.debug.start_debug_server` registers the rank's worker in the job's
TCPStore, which rank 0's `init_process_group` creates: called before it, rank 0 would wait
for a store no one serves yet. So a thread waits until the default process group exists,
then starts the server; the training script needs no other change. It is opt-in: the server
answers anyone who reaches its ports, so it is for trusted networks only.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time

from triage.job.probe_protocol import DEBUG_SERVER_PORT_ENV
from triage.probe._common import dist_module

POLL_S = 0.5
THREAD_NAME = "triage-debug-server"

_lock = threading.Lock()
_port: int | None = None


def serve_debug(port: int) -> None:
    """Start torch's debug server on `port` once this rank's process group exists; once per
    process (a later call with another port is refused with a message)."""
    global _port
    with _lock:
        if _port is not None:
            if port != _port:
                _say(f"the debug server is already asked for on port {_port}, not {port}")
            return
        _port = port
    threading.Thread(target=_start_when_ready, args=(port,), name=THREAD_NAME, daemon=True).start()


def serve_debug_from_env() -> None:
    """`import triage.probe` with `$TRIAGE_DEBUG_SERVER_PORT` set starts the server."""
    value = os.environ.get(DEBUG_SERVER_PORT_ENV, "").strip()
    if not value:
        return
    if not value.isdigit() or not 0 < int(value) < 65536:
        _say(f"{DEBUG_SERVER_PORT_ENV}={value!r} is not a port: no debug server")
        return
    serve_debug(int(value))


def _start_when_ready(port: int) -> None:
    while dist_module() is None:
        time.sleep(POLL_S)
    try:
        debug = importlib.import_module("torch.distributed.debug")
        debug.start_debug_server(port=port)
    except Exception as exc:  # torch before 2.10, a missing dependency: the job goes on
        _say(f"debug server not started: {type(exc).__name__}: {exc}".splitlines()[0])


def _say(text: str) -> None:
    print(f"triage.probe: {text}", file=sys.stderr, flush=True)
