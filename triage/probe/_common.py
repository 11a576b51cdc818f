"""What the probe's parts share: where files go, this rank's identity, atomic writes.

The protocol's names come from triage.job.probe_protocol, which the sender imports too.
Only the standard library; torch is looked up in `sys.modules`, never imported here.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from triage.job.probe_protocol import (
    DEFAULT_DUMP_DIR,
    DEFAULT_FR_DIR,
    DEFAULT_FR_PREFIX,
    DUMP_DIR_ENV,
    FR_DIR_ENV,
    FR_PREFIX_ENV,
)

# The protocol's names, under the names triage.probe has always exported.
DIR_ENV = FR_DIR_ENV
DEFAULT_DIR = DEFAULT_FR_DIR
PREFIX_ENV = FR_PREFIX_ENV
DEFAULT_PREFIX = DEFAULT_FR_PREFIX


def loaded(name: str) -> ModuleType | None:
    """A module the job already imported (torch and its parts), else None."""
    return sys.modules.get(name)


def dist_module() -> ModuleType | None:
    """torch.distributed when the job initialised a default group, else None."""
    dist = loaded("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # a half torn-down group reads as none
        pass
    return None


def rank() -> int | None:
    """The global rank: from torch.distributed when the job initialised it, else RANK."""
    dist = dist_module()
    if dist is not None:
        try:
            return int(dist.get_rank())
        except Exception:  # a half torn-down group: fall back to the launcher's word
            pass
    value = os.environ.get("RANK", "")
    return int(value) if value.isdigit() else None


def dump_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """Where snapshots go: the argument, `$TRIAGE_DUMP_DIR`, or `./triage-dumps`."""
    return Path(directory or os.environ.get(DUMP_DIR_ENV) or DEFAULT_DUMP_DIR).absolute()


def write_atomic(target: Path, data: bytes) -> Path:
    """Write aside, then rename: readers never see half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


def flight_recorder_bytes() -> bytes | None:
    """This rank's Flight Recorder dump (torch's own pickle); None when torch is not loaded."""
    if loaded("torch._C") is None:
        return None
    c10d = importlib.import_module("torch._C._distributed_c10d")  # loaded with torch already
    # `_dump_fr_trace` serves every backend; older torch has only the NCCL-specific call.
    dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
    if dump is None:
        raise RuntimeError("this torch has no Flight Recorder dump call")
    data: bytes = dump(True, True, False)
    return data
