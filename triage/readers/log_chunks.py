"""Split logs into stretches and run the first pass over them on every core.

A job's logs are many files (a rank's log each) and some are gigabytes: both are cut into
stretches of about CHUNK bytes that end at a line's end, and the stretches are read by a
pool of processes (the DFA and the byte counts hold the GIL, so threads would not run them
side by side). Results come back in file and stretch order; at most a few stretches are in
flight per process, so memory stays bounded by the pool, not by the logs. Small inputs are
read in this process: a pool costs more to start than they take to read.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from triage.readers.log_prefilter import RangeScan, Table, compile_table, scan_range

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

CHUNK = 16 << 20
#: How far past a cut the scanner looks for a line's end before cutting inside the line.
ALIGN = 1 << 20
#: Below this many bytes in all, the logs are read in this process.
PARALLEL_BYTES = 64 << 20
#: Stretches in flight per process: enough to keep the pool busy while results are read.
IN_FLIGHT = 3


@dataclass(frozen=True)
class Stretch:
    """Bytes [start, end) of one file."""

    path: str
    start: int
    end: int


def stretches(path: Path, size: int) -> list[Stretch]:
    """The file cut every CHUNK bytes at the next line's end (inside a line only when no
    newline comes within ALIGN bytes: a binary file or a progress bar redrawn in place)."""
    if size <= CHUNK:
        return [Stretch(str(path), 0, size)] if size else []
    cuts = [0]
    with path.open("rb") as handle:
        target = CHUNK
        while target < size:
            handle.seek(target)
            window = handle.read(ALIGN)
            newline = window.find(b"\n")
            cut = target + newline + 1 if newline != -1 else target
            if cut >= size:
                break
            cuts.append(cut)
            target = cut + CHUNK
    cuts.append(size)
    return [Stretch(str(path), a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def scan_stretches(files: Sequence[tuple[Path, int]]) -> Iterator[tuple[int, RangeScan]]:
    """(file index, scan) for every stretch of every file, in order; files given with their
    sizes. Uses the cores there are when the logs are big enough to pay for a pool, and the
    pool `start_early` began when it began on these very stretches."""
    work = [(index, s) for index, (path, size) in enumerate(files) for s in stretches(path, size)]
    early = _take_early([s for _, s in work])
    if early is not None:
        yield from _drain(early.pool, early.pending, early.cores, work)
        return
    cores = _cores()
    total = sum(size for _, size in files)
    if cores < 2 or total < PARALLEL_BYTES or len(work) < 2:
        for index, s in work:
            yield index, scan_range(s.path, s.start, s.end)
        return
    yield from _pooled(work, cores)


def start_early(argv: list[str]) -> None:
    """For `triage analyze FILE...` on logs big enough for a pool, fork the pool and start
    reading their first stretches now, before the CLI's imports (typer, pydantic, the rules):
    on a few cores those imports would otherwise leave the pool's cores idle while they run.

    Only plain files named on the command line are read early (a folder's logs are chosen
    by the collector), only from a process with one thread (the workers are forked), and
    only while the results waiting for the reader hold few lines (EARLY_LINES):
    `scan_stretches` takes the pool over when it asks for the same stretches of the same
    signature table, and shuts it down otherwise.
    """
    global _early
    if not argv or argv[0] != "analyze" or not _one_thread():
        return
    files = _named_files(argv[1:])
    cores = _cores()
    if cores < 2 or sum(size for _, size in files) < PARALLEL_BYTES:
        return
    work = [s for path, size in files for s in stretches(path, size)]
    if len(work) < 2:
        return
    table = compile_table()
    pool = _fork_pool(cores)
    pending: deque[Future[RangeScan]] = deque()
    try:
        for s in work[: cores * IN_FLIGHT]:
            pending.append(pool.submit(scan_range, s.path, s.start, s.end))
    except (OSError, RuntimeError):  # no process could start: the CLI reads them itself
        pool.shutdown(wait=False, cancel_futures=True)
        return
    _early = _Early(work, table, pool, pending, cores)
    _early.feeder.start()


#: Lines the early results may hold before `start_early` stops handing the pool more: a
#: log of frequent lines yields next to none per stretch and is read whole during the
#: imports; one full of rare lines waits for the reader, whose bound is IN_FLIGHT.
EARLY_LINES = 200_000


@dataclass
class _Early:
    """A pool `start_early` forked, with the stretches it was given and those in flight;
    its feeder hands the pool the next stretch as each result comes back, while what the
    results hold stays under EARLY_LINES."""

    work: list[Stretch]
    table: Table
    pool: ProcessPoolExecutor
    pending: deque[Future[RangeScan]]
    cores: int
    stop: threading.Event = field(default_factory=threading.Event)
    feeder: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.feeder = threading.Thread(target=self._feed, name="triage-log-feeder", daemon=True)

    def _feed(self) -> None:
        held = 0
        for index, s in enumerate(self.work):
            if index < len(self.pending):
                continue
            try:
                done = self.pending[index - self.cores * IN_FLIGHT].result()
            except (OSError, RuntimeError):  # a broken pool: the reader meets it and reads here
                return
            held += len(done.hits) + len(done.overflow)
            if held > EARLY_LINES or self.stop.is_set():
                return
            try:
                self.pending.append(self.pool.submit(scan_range, s.path, s.start, s.end))
            except RuntimeError:  # shut down: the reader took over
                return

    def take_over(self) -> None:
        """Stop feeding: from here the reader submits what is left."""
        self.stop.set()
        self.feeder.join()


_early: _Early | None = None


def _named_files(tokens: list[str]) -> list[tuple[Path, int]]:
    """The command line's plain files with their sizes, in order (options and folders are
    left to the CLI)."""
    files = []
    for token in tokens:
        if token.startswith("-"):
            continue
        path = Path(token)
        try:
            status = path.stat()
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(status.st_mode):
            files.append((path, status.st_size))
    return files


def _take_early(work: list[Stretch]) -> _Early | None:
    """The early pool when it reads these stretches with today's table, once; otherwise it
    is shut down and None."""
    global _early
    early, _early = _early, None
    if early is None:
        return None
    early.take_over()
    if early.table is compile_table() and _same(early.work, work):
        return early
    early.pool.shutdown(wait=False, cancel_futures=True)
    return None


def _same(a: list[Stretch], b: list[Stretch]) -> bool:
    """The same stretches of the same files, however each path was spelled."""
    return [(os.path.realpath(s.path), s.start, s.end) for s in a] == [
        (os.path.realpath(s.path), s.start, s.end) for s in b
    ]


def _one_thread() -> bool:
    """Whether this process runs one thread: only then are forked workers safe."""
    return threading.active_count() == 1


def _cores() -> int:
    """The cores this process may run on (a container's or a Slurm task's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _fork_pool(cores: int) -> ProcessPoolExecutor:
    """A pool of `cores` processes, forked where this process has one thread (the DFA
    compiled here is shared with them), spawned otherwise."""
    import multiprocessing as mp  # only logs big enough for a pool pay for its import
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if _one_thread() and "fork" in mp.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(cores, mp_context=mp.get_context(method))


def _pooled(work: list[tuple[int, Stretch]], cores: int) -> Iterator[tuple[int, RangeScan]]:
    """Scan the stretches on a pool, yielding in order; falls back to this process where a
    pool cannot start. The DFA is compiled first, so forked workers share it."""
    compile_table()
    yield from _drain(_fork_pool(cores), deque(), cores, work)


def _drain(
    pool: ProcessPoolExecutor,
    pending: deque[Future[RangeScan]],
    cores: int,
    work: list[tuple[int, Stretch]],
) -> Iterator[tuple[int, RangeScan]]:
    """Results in order from a pool that has the first `len(pending)` stretches in flight,
    keeping at most IN_FLIGHT per process; what the pool cannot finish is read in this
    process."""
    from concurrent.futures.process import BrokenProcessPool

    done = 0
    submitted = len(pending)
    try:
        with pool:
            for _, s in work[submitted:]:
                pending.append(pool.submit(scan_range, s.path, s.start, s.end))
                if len(pending) >= cores * IN_FLIGHT:
                    yield work[done][0], pending.popleft().result()
                    done += 1
            while pending:
                yield work[done][0], pending.popleft().result()
                done += 1
    except (OSError, BrokenProcessPool, RuntimeError):
        for index, s in work[done:]:
            yield index, scan_range(s.path, s.start, s.end)
