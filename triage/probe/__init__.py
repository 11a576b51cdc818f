"""In-process evidence from a training job: `import triage.probe` in the training script.

Some evidence exists only inside the training process: the DeviceMesh, each parameter's
DTensor placements, whether replicas still hold the same weights, gradients that never
arrived, CUDA memory. The probe gathers it without a collective, so it works while peers
hang:

- `snapshot(model, optimizer, tag=...)` writes this rank's evidence as one JSON file
  (`triage.observations.ProbeSnapshot`) per call to `$TRIAGE_DUMP_DIR` (./triage-dumps):
  `triage-probe-rank{rank}-call{call:04d}-pid{pid}.json`, its Flight Recorder dump beside it.
- `install(model, optimizer)`: the same snapshot on SIGUSR1, taken by a helper thread while
  the main thread is blocked in a collective; `triage hang --signal-probe` and `triage run`
  send the signal. Importing the module already installs it (without a model); on the
  signal the rank also dumps its Flight Recorder to `$TRIAGE_FR_DIR/nccl_trace_rank_<rank>`
  (./triage-fr; `TRIAGE_FR_PREFIX` changes the name, `TRIAGE_FR_SIGNAL` the signal, `off`
  skips the import-time install). The probe thread's OS name (`triage-probe10` for
  SIGUSR1) tells senders that this process handles the signal (a process without a
  handler would be killed by SIGUSR1); see triage.job.probe_protocol.
- `check_replicas(model)`: a collective check that replicated parameters, gradients and
  buffers are equal on every rank, for the job's own tests and CI.
- `comm_summary(fn, *args)`: one step under CommDebugMode, collective counts per module.
- PyTorch's debug server (`torch.distributed.debug.start_debug_server`, torch 2.10+), started
  on every rank once its process group exists, only when asked: `install(debug_server_port=
  PORT)` or `$TRIAGE_DEBUG_SERVER_PORT` (`triage run --debug-server-port`). For trusted
  networks only; `triage hang --debug-server MASTER_ADDR:PORT` reads every rank through it.

Only the standard library is imported here; torch is used only when the job imported it
(check_replicas and comm_summary import it: only a torch job calls them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from triage.job.probe_protocol import (
    DEFAULT_DUMP_DIR,
    DUMP_DIR_ENV,
    SIGNAL_ENV,
    SNAPSHOT_PREFIX,
    THREAD_NAME,
)
from triage.probe._common import DEFAULT_DIR, DEFAULT_PREFIX, DIR_ENV, PREFIX_ENV
from triage.probe._debug_server import serve_debug_from_env
from triage.probe._replicas import (
    CommSummary,
    Divergence,
    ReplicaReport,
    check_replicas,
    comm_summary,
)
from triage.probe._signal import Installed, auto_install, dump_now, install, installed
from triage.probe._snapshot import take

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_DUMP_DIR",
    "DEFAULT_PREFIX",
    "DIR_ENV",
    "DUMP_DIR_ENV",
    "PREFIX_ENV",
    "SIGNAL_ENV",
    "SNAPSHOT_PREFIX",
    "THREAD_NAME",
    "CommSummary",
    "Divergence",
    "Installed",
    "ReplicaReport",
    "check_replicas",
    "comm_summary",
    "dump_now",
    "install",
    "installed",
    "snapshot",
]


def snapshot(
    model: Any = None,
    optimizer: Any = None,
    tag: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    flight_recorder: bool = False,
) -> Path | None:
    """Write this rank's evidence now; the file's path (None if it could not be written).

    No collective is called, and nothing raises: what could not be gathered is listed in
    the file's `errors`. `directory` defaults to the one given to install(), then
    `$TRIAGE_DUMP_DIR`, then ./triage-dumps. `flight_recorder=True` also writes the
    Flight Recorder dump beside it. Off by default: ranks reach a call at different
    moments of a running job, so their dumps would disagree on which collectives finished
    and read as a hang; the signal path (a job that is stuck) always takes one.
    """
    state = installed()
    where = directory or (state.dump_dir if state is not None else None)
    return take(model, optimizer, tag, "call", where, flight_recorder)


auto_install()
serve_debug_from_env()
