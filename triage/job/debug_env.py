"""The debug settings `triage run` gives a job, and the folder everything lands in.

The job runs unchanged; only its environment gains what a senior engineer would set before
a rerun (Flight Recorder buffer and dump files, NCCL INFO logs per process, torchrun's
per-rank prefixes and logs, triage.probe's folders, optionally TORCH_DISTRIBUTED_DEBUG),
and every value the user set wins.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from triage.errors import TriageError
from triage.job.probe_protocol import (
    DEBUG_SERVER_PORT_ENV,
    DEFAULT_FR_PREFIX,
    DUMP_DIR_ENV,
    FR_DIR_ENV,
)

LAUNCHER_LOG = "launcher.log"
FR_DIR = "fr"
NCCL_DIR = "nccl"
PROBE_DIR = "probe"
TORCHRUN_DIR = "torchrun"
#: torch's own default name for Flight Recorder dump files; triage.probe writes the same.
FR_PREFIX = DEFAULT_FR_PREFIX
#: NCCL's dump-on-write fifos; hidden so that folder walks never open (and block on) them.
PIPE_PREFIX = ".nccl_pipe_rank_"
FR_BUFFER_ENTRIES = "2000"


class RunError(TriageError):
    """`triage run` could not start the job: bad output folder, command not found."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Setting:
    """One debug variable; `names` are aliases torch reads in order (new name first),
    `only` the aliases to set when not all of them (None: all)."""

    names: tuple[str, ...]
    value: str
    only: tuple[str, ...] | None = None


def torch_version() -> tuple[int, int] | None:
    """(major, minor) of the torch installed beside triage, read without importing it."""
    try:
        major, minor = importlib.metadata.version("torch").split(".")[:2]
        return int(major), int(minor)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def settings(
    out: Path,
    debug_detail: bool,
    torch: tuple[int, int] | None,
    debug_server_port: int | None = None,
) -> list[Setting]:
    """What to set. torch >= 2.8 reads TORCH_FR_BUFFER_SIZE and warns on every rank about
    the old name, older torch reads only the old one; both when the version is unknown.
    `debug_server_port` asks triage.probe to start PyTorch's debug server (opt-in: it
    answers anyone who reaches the port)."""
    fr, nccl = out / FR_DIR, out / NCCL_DIR
    buffer = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
    only = None if torch is None else buffer[:1] if torch >= (2, 8) else buffer[1:]
    chosen = [
        # Flight Recorder: the last collectives of every rank (off by default in older torch)
        Setting(buffer, FR_BUFFER_ENTRIES, only),
        # NCCL dumps the recorder when a collective times out, one file per rank, here
        Setting(("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"), "1"),
        Setting(
            ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), str(fr / FR_PREFIX)
        ),
        # ... and on demand, when its pipe is written (triage run does on a hang)
        Setting(("TORCH_NCCL_DEBUG_INFO_PIPE_FILE",), str(fr / PIPE_PREFIX)),
        # NCCL's setup, transports and errors, one log per process
        Setting(("NCCL_DEBUG",), "INFO"),
        Setting(("NCCL_DEBUG_FILE",), str(nccl / "nccl.%h.%p")),
        # where triage.probe writes its dumps (gloo has no dump of its own on a hang)
        Setting((FR_DIR_ENV,), str(fr)),
        # ... and its snapshots (the job's own probe.snapshot() calls, and on the signal)
        Setting((DUMP_DIR_ENV,), str(out / PROBE_DIR)),
        # torchrun --tee 3 --log-dir: every line says its rank; per-rank logs and error files
        Setting(("PET_TEE",), "3"),
        Setting(("PET_LOG_DIR",), str(out / TORCHRUN_DIR)),
        # output reaches the log before a crash or a kill
        Setting(("PYTHONUNBUFFERED",), "1"),
    ]
    if debug_detail:  # collective fingerprint checks: mismatches fail instead of hanging
        chosen.append(Setting(("TORCH_DISTRIBUTED_DEBUG",), "DETAIL"))
    if debug_server_port is not None:  # every rank that imports triage.probe starts it
        chosen.append(Setting((DEBUG_SERVER_PORT_ENV,), str(debug_server_port)))
    return chosen


@dataclass
class JobEnvironment:
    env: dict[str, str]
    applied: dict[str, str] = field(default_factory=dict)
    #: name -> (the user's value, what triage run would have set)
    kept: dict[str, tuple[str, str]] = field(default_factory=dict)

    def kept_lines(self) -> list[str]:
        return [
            f"kept your {name}={theirs!r} (triage run would set {ours!r})"
            for name, (theirs, ours) in self.kept.items()
        ]


def job_environment(
    base: Mapping[str, str],
    out: Path,
    debug_detail: bool,
    debug_server_port: int | None = None,
) -> JobEnvironment:
    """The job's environment: `base` plus the debug settings the user did not set.

    A setting with aliases is skipped whole when the user set any alias, because torch
    reads the first one set (their TORCH_NCCL_TRACE_BUFFER_SIZE=0 must not lose to our
    TORCH_FR_BUFFER_SIZE).
    """
    result = JobEnvironment(env=dict(base))
    for setting in settings(out, debug_detail, torch_version(), debug_server_port):
        theirs = [name for name in setting.names if name in base]
        if theirs:
            result.kept |= {
                name: (base[name], setting.value) for name in theirs if base[name] != setting.value
            }
            continue
        for name in setting.only or setting.names:
            result.env[name] = setting.value
            result.applied[name] = setting.value
    return result


def output_dir(requested: Path | None) -> Path:
    """The run's folder: new, or empty; never a folder holding someone's files."""
    if requested is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        requested = Path(f"triage-run-{stamp}")
        suffix = 1
        while requested.exists():
            suffix += 1
            requested = Path(f"triage-run-{stamp}-{suffix}")
    out = requested.absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunError(f"{out} exists and is not an empty folder; choose another --out")
    for sub in (out, out / FR_DIR, out / NCCL_DIR):
        sub.mkdir(parents=True, exist_ok=True)
    return out
