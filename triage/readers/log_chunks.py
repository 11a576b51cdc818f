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
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triage.readers.log_prefilter import RangeScan, compile_table, scan_range

if TYPE_CHECKING:
    from concurrent.futures import Future

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
    sizes. Uses the cores there are when the logs are big enough to pay for a pool."""
    work = [(index, s) for index, (path, size) in enumerate(files) for s in stretches(path, size)]
    cores = _cores()
    total = sum(size for _, size in files)
    if cores < 2 or total < PARALLEL_BYTES or len(work) < 2:
        for index, s in work:
            yield index, scan_range(s.path, s.start, s.end)
        return
    yield from _pooled(work, cores)


def _cores() -> int:
    """The cores this process may run on (a container's or a Slurm task's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _pooled(work: list[tuple[int, Stretch]], cores: int) -> Iterator[tuple[int, RangeScan]]:
    """Scan the stretches on a pool, yielding in order; falls back to this process where a
    pool cannot start. The DFA is compiled first, so forked workers share it."""
    import multiprocessing as mp  # only logs big enough for a pool pay for its import
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    compile_table()
    method = (
        "fork"
        if threading.active_count() == 1 and "fork" in mp.get_all_start_methods()
        else "spawn"
    )
    done = 0
    try:
        with ProcessPoolExecutor(cores, mp_context=mp.get_context(method)) as pool:
            pending: deque[Future[RangeScan]] = deque()
            for _, s in work:
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
