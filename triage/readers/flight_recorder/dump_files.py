"""Finding and reading dump files: which files are Flight Recorder dumps (by their first
bytes, whatever their names), reading one (JSON, or a pickle through the fast path or the
restricted unpickler) into a RankDump, and reading thousands of them on every idle core."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from triage.readers.files import files_by_head
from triage.readers.flight_recorder.dump_bytes import HEAD_BYTES, MAX_DUMP_BYTES, TAIL_BYTES, _Bytes
from triage.readers.flight_recorder.dump_entries import _reduce, file_name, rank_from_name
from triage.readers.flight_recorder.dump_records import (
    NotFlightRecorder,
    RankDump,
    UnreadableDump,
    intern_members,
)
from triage.readers.flight_recorder.fast_pickle import _fast_pickle
from triage.readers.object_bounds import TooManyObjects, check_json
from triage.readers.safe_pickle import UntrustedPickleError, load_untrusted

SNIFF_BYTES = 1 << 20  # a dump's first entry, and with it its keys, lies within
# Files from which reading is spread over idle cores: a dump takes about a quarter of a
# millisecond to read and a third as long again to send back from a worker, and starting
# workers costs tens of milliseconds.
PARALLEL_FILES = 512
#: JSON dumps are parsed whole, at about eight times their size in memory; torch writes
#: a few MB per 2,000 entries.
MAX_JSON_DUMP_BYTES = 64 << 20
MAX_WORKERS = 8


def looks_like_dump(head: bytes) -> bool:
    """A document whose first bytes carry Flight Recorder keys (its first entry has them;
    torch's pickles name pg_config in their first bytes)."""
    return b"pg_config" in head or b"collective_seq_id" in head or b"profiling_name" in head


def read_dump(path: str | Path) -> RankDump:
    """Reduce one rank's dump file; NotFlightRecorder or UnreadableDump when it is not one.
    Other documents are told apart by their head and never read whole; a dump torch
    wrote is mostly read at its head and its tail only."""
    fd = os.open(path, os.O_RDONLY)  # thousands of files: no buffered file object each
    try:
        size = os.fstat(fd).st_size
        want = size if size <= HEAD_BYTES + TAIL_BYTES else HEAD_BYTES
        head = os.read(fd, want)
        while len(head) < want and (more := os.read(fd, want - len(head))):
            head += more
    finally:
        os.close(fd)
    if not looks_like_dump(head):
        raise NotFlightRecorder
    if size > MAX_DUMP_BYTES:
        raise UnreadableDump(f"over the {MAX_DUMP_BYTES}-byte limit for dumps: not read")
    return _parse(str(path), _Bytes(str(path), head, size))


def parse_dump(path: str, data: bytes) -> RankDump:
    """Reduce one rank's dump from its bytes (pickle or JSON)."""
    if not looks_like_dump(data[:SNIFF_BYTES]):
        raise NotFlightRecorder
    return _parse(path, _Bytes(None, data, len(data)))


def _parse(path: str, view: _Bytes) -> RankDump:
    """Reduce a dump whose head looked like one."""
    if view.byte(0) == 0x80:
        fast = _fast_pickle(view)
        if fast is not None:
            header, entries, total = fast
            return _reduce(path, header, entries, total, fast=True)
        try:
            document = load_untrusted(view.whole(), MAX_DUMP_BYTES)
        except UntrustedPickleError as exc:
            raise UnreadableDump(exc.reason) from None
    else:
        if view.size > MAX_JSON_DUMP_BYTES:
            raise UnreadableDump(
                f"over the {MAX_JSON_DUMP_BYTES}-byte limit for JSON dumps: not read"
            )
        try:
            data = view.whole()
            check_json(data)
            document = json.loads(data.decode("utf-8", "replace"))
        except TooManyObjects as exc:
            raise UnreadableDump(str(exc)) from None
        except RecursionError:
            raise UnreadableDump("corrupt JSON: nested too deeply") from None
        except ValueError as exc:
            raise UnreadableDump(f"corrupt JSON: {exc}") from None
    if not isinstance(document, dict) or not (
        isinstance(document.get("entries"), list) or "pg_config" in document
    ):
        raise NotFlightRecorder
    raw = document.get("entries")
    entries = raw if isinstance(raw, list) else []
    return _reduce(path, document, entries, len(entries), fast=False)


@dataclass
class ReadResult:
    """Every file of a folder of dumps, sorted: read, not a dump, or unreadable (why)."""

    dumps: list[RankDump] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    def merge(self, other: ReadResult) -> None:
        """Take another process's results; its member lists become this process's shared
        tuples again (each batch pickled its own copy)."""
        local: dict[int, tuple[int, ...]] = {}  # a batch shares one tuple per member list
        for dump in other.dumps:
            dump.configs = {
                name: local.get(id(m)) or local.setdefault(id(m), intern_members(m))
                for name, m in dump.configs.items()
            }
        self.dumps += other.dumps
        self.skipped += other.skipped
        self.unreadable += other.unreadable


def read_files(paths: Sequence[str]) -> ReadResult:
    """Read dumps one after another; each is dropped once reduced. The cycle collector
    waits meanwhile: a dump leaves a few objects that live on and thousands that die with
    their reference counts, none in cycles, so collections would only rescan the results."""
    result = ReadResult()
    collecting = gc.isenabled()
    gc.disable()
    try:
        for path in paths:
            try:
                result.dumps.append(read_dump(path))
            except NotFlightRecorder:
                result.skipped.append(path)
            except UnreadableDump as exc:
                result.unreadable.append((path, str(exc)))
            except OSError as exc:
                result.unreadable.append((path, f"cannot read: {exc.strerror or exc}"))
            except Exception as exc:  # crafted content must cost its file, not the analysis
                reason = f"unexpected content ({type(exc).__name__}: {exc})"
                result.unreadable.append((path, reason.splitlines()[0][:300]))
    finally:
        if collecting:
            gc.enable()
    return result


def read_all(paths: Sequence[str], workers: int | None = None) -> ReadResult:
    """Read many dumps on several cores: each file is independent, and at thousands of
    ranks reading dominates. This process reads the first share itself while `workers - 1`
    others read the rest (half the results to ship back than with idle waiting); the
    results keep the files' order, as one process would give them. By default only
    cores left idle are used. Falls back to one process where a pool cannot start."""
    cores = workers if workers is not None else idle_cores()
    if cores < 2 or len(paths) < PARALLEL_FILES:
        return read_files(paths)
    import multiprocessing as mp  # only hundreds of dumps on idle cores pay for a pool
    import threading
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    size = -(-len(paths) // cores)
    shares = [list(paths[at : at + size]) for at in range(0, len(paths), size)]
    method = (
        "fork"
        if threading.active_count() == 1 and "fork" in mp.get_all_start_methods()
        else "spawn"
    )
    result = ReadResult()
    try:
        with ProcessPoolExecutor(len(shares) - 1, mp_context=mp.get_context(method)) as pool:
            others = pool.map(read_files, shares[1:])
            result.merge(read_files(shares[0]))
            for part in others:
                result.merge(part)
    except (OSError, BrokenProcessPool, RuntimeError):
        return read_files(paths)
    return result


def idle_cores() -> int:
    """Cores the last minute's load average leaves idle, as `make -l` judges it: on a busy
    machine a worker only takes turns with this process and adds the cost of sending
    its dumps back."""
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average on this platform: take every core
        busy = 0.0
    return max(1, min(MAX_WORKERS, (os.cpu_count() or 1) - round(busy)))


def find_dump_files(folder: Path, limit: int) -> list[str]:
    """Up to `limit` files under the folder that are a pickle or JSON document by their
    first byte: the candidates among which reading tells dumps from other documents."""
    return files_by_head(folder, lambda head: head.lstrip()[:1] in (b"\x80", b"{"), 64, limit)


def dump_stem(path: str) -> str:
    """A dump's name without its rank: files of one job share it."""
    name = file_name(path)
    rank = rank_from_name(path)
    if rank is None:
        return name
    at = name.rfind(str(rank))
    return name[:at] if at >= 0 else name


def unreadable_files(result: ReadResult) -> list[tuple[str, str]]:
    """(file, why) of every file that could not be read, then of the skipped files named
    like the dumps read: a rank's file that is not a dump."""
    named = {dump_stem(d.path) for d in result.dumps}
    unreadable = list(result.unreadable)
    for path in result.skipped:
        if dump_stem(path) in named:
            unreadable.append((path, "not a Flight Recorder dump, though named like the others"))
    return unreadable
