"""Ask live ranks for a `triage.probe` snapshot: the sender's side, shared by the
`signal_probes` tool (`triage hang --signal-probe`) and `triage run`.

A signal is sent only where it cannot hurt: the process runs the probe's thread, whose OS
name (/proc/PID/task/*/comm, `triage-probe10`) says which signal it owns (a job that takes
the signal over for itself, a SLURM requeue handler say, renames it `triage-probe-x`), the
kernel shows a handler for that signal (/proc/PID/status SigCgt; without one SIGUSR1
kills the rank), and torch is loaded in it (without torch the probe has nothing to dump).
On the signal the rank dumps its Flight Recorder where its `TRIAGE_FR_DIR` points, then
writes its snapshot (naming that dump) where its `TRIAGE_DUMP_DIR` points, else
`triage-dumps/` in its working directory; new files named after its pid are waited for, a
few seconds at most. triage.probe is not imported here: importing it would install its
handler in this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from triage.job.probe_protocol import DEFAULT_DUMP_DIR, DUMP_DIR_ENV, signal_of, snapshot_glob
from triage.models import Gap
from triage.readers.object_bounds import check_json

WAIT_S = 10.0
MAX_SNAPSHOT_BYTES = 256 << 20
#: Signals a probe may listen on: ones that mean nothing else to a process.
SAFE_SIGNALS = {signal.SIGUSR1, signal.SIGUSR2, *range(signal.SIGRTMIN, signal.SIGRTMAX + 1)}


@dataclass
class SnapshotRequest:
    """What asking the ranks gave: pids signalled, snapshot files, and what went wrong."""

    sent: list[int] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    #: Ranks that run no probe thread owning a signal (each has a gap saying so).
    unprobed: list[int] = field(default_factory=list)

    def note(self) -> str:
        """The report's line saying which ranks were signalled."""
        if not self.sent:
            return "--signal-probe: no rank was signalled (see gaps)"
        return (
            f"--signal-probe: sent triage.probe's signal to {len(self.sent)} ranks (pids"
            f" {', '.join(map(str, self.sent))}) for an in-process snapshot;"
            f" {len(self.files)} snapshot files came back"
        )

    def probe_gaps(self) -> list[Gap]:
        """The gaps of ranks that run a probe: `triage run` asks every rank of a job, and
        most jobs have none."""
        quiet = {f"pid:{pid}" for pid in self.unprobed}
        return [gap for gap in self.gaps if gap.source not in quiet]

    def dumps(self) -> dict[str, str]:
        """Snapshot file -> the Flight Recorder dump it names, for those that name one."""
        named = {name: flight_recorder_of(Path(name)) for name in self.files}
        return {name: str(dump) for name, dump in named.items() if dump is not None}

    def evidence_paths(self, dumps: Mapping[str, str] | None = None) -> list[str]:
        """The snapshots and the Flight Recorder dump each one names, for the playbook;
        `dumps` when the caller read them already (each read parses a snapshot)."""
        paths = []
        dumps = self.dumps() if dumps is None else dumps
        for name in self.files:
            paths.append(name)
            if name in dumps and dumps[name] not in paths:
                paths.append(dumps[name])
        return paths


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for `signum` right now (/proc's SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def probe_signal(pid: int) -> int | None:
    """The signal the process's triage.probe thread listens on, read from the thread's OS
    name (`triage-probe10`: SIGUSR1); None without a probe thread, or when the job took
    the signal over (`triage-probe-x`)."""
    for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
        with contextlib.suppress(OSError):
            signum = signal_of(comm.read_text().strip())
            if signum is not None:
                return signum
    return None


def torch_loaded(pid: int) -> bool | None:
    """Whether torch's library is mapped into the process; None when its maps are hidden."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            return any(b"/libtorch" in line for line in maps)
    except OSError:
        return None


def snapshot_dir(pid: int, environ: Mapping[str, str]) -> Path | None:
    """Where the rank writes snapshots: its TRIAGE_DUMP_DIR (relative to its working
    directory), else ./triage-dumps there; None when its working directory is hidden."""
    chosen = environ.get(DUMP_DIR_ENV) or DEFAULT_DUMP_DIR
    if os.path.isabs(chosen):
        return Path(chosen)
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")) / chosen
    except OSError:
        return None


def snapshots_of(directory: Path, pid: int) -> set[Path]:
    """The snapshot files of one process in a folder (its pid is in their names)."""
    return set(directory.glob(snapshot_glob(pid)))


def _gap(pid: int, reason: str, hint: str | None = None) -> Gap:
    return Gap(source=f"pid:{pid}", reason=reason, hint=hint, tool="signal_probes")


def flight_recorder_of(snapshot: Path) -> Path | None:
    """The Flight Recorder dump a snapshot names (its path is relative to the snapshot)."""
    try:
        with snapshot.open("rb") as handle:
            raw = handle.read(MAX_SNAPSHOT_BYTES)
        check_json(raw)
        data = json.loads(raw)
    except (OSError, ValueError):  # TooManyObjects among them
        return None
    name = data.get("flight_recorder") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        return None
    dump = (snapshot.parent / name).resolve()
    return dump if dump.is_file() else None


def request_snapshots(pids: Iterable[int], wait_s: float = WAIT_S) -> SnapshotRequest:
    """Signal every rank that runs triage.probe and collect the snapshots they write."""
    request = SnapshotRequest()
    waiting: dict[int, tuple[Path, set[Path]]] = {}
    for pid in pids:
        try:
            environ = psutil.Process(pid).environ()
        except (psutil.Error, OSError) as exc:
            request.gaps.append(_gap(pid, f"not signalled: its environment is unreadable ({exc})"))
            continue
        signum = probe_signal(pid)
        if signum is None:
            request.unprobed.append(pid)
            request.gaps.append(
                _gap(
                    pid,
                    "not signalled: it runs no triage.probe thread that owns a signal",
                    "add `triage.probe.install(model, optimizer)` to the script",
                )
            )
            continue
        directory = snapshot_dir(pid, environ)
        reason = _refusal(pid, signum, directory)
        if reason is not None:
            request.gaps.append(
                _gap(pid, reason, "add `triage.probe.install(model, optimizer)` to the script")
            )
            continue
        assert directory is not None
        before = snapshots_of(directory, pid)
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError) as exc:
            request.gaps.append(_gap(pid, f"not signalled: {exc}"))
            continue
        request.sent.append(pid)
        waiting[pid] = (directory, before)
    request.files, late = wait_for_snapshots(waiting, wait_s)
    request.gaps += [_gap(pid, f"no triage.probe snapshot within {wait_s:g}s") for pid in late]
    return request


def _refusal(pid: int, signum: int, directory: Path | None) -> str | None:
    """Why this rank must not be signalled, or None."""
    try:
        name = signal.Signals(signum).name
    except ValueError:  # a real-time signal between SIGRTMIN and SIGRTMAX
        name = f"signal {signum}"
    if signum not in SAFE_SIGNALS:
        return f"not signalled: the probe listens on {name}, which may mean more to it"
    if not catches(pid, signum):
        return f"not signalled: no handler for {name}, which would kill it"
    if torch_loaded(pid) is False:
        return "not signalled: torch is not loaded in it, so it has nothing to dump"
    if directory is None:
        return "not signalled: its working directory (where snapshots go) is unreadable"
    return None


def wait_for_snapshots(
    waiting: Mapping[int, tuple[Path, set[Path]]], wait_s: float = WAIT_S
) -> tuple[list[str], list[int]]:
    """Poll until every pid wrote a snapshot not in its `before` set, or time runs out.

    Returns the new files and the pids that wrote none. A file appears whole (the probe
    renames it into place), so any file found is complete.
    """
    found: dict[int, list[Path]] = {}
    deadline = time.monotonic() + wait_s
    while True:
        for pid, (directory, before) in waiting.items():
            if pid not in found:
                new = sorted(snapshots_of(directory, pid) - before)
                if new:
                    found[pid] = new
        if len(found) == len(waiting) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    files = [str(path) for pid in sorted(found) for path in found[pid]]
    return files, sorted(set(waiting) - set(found))
