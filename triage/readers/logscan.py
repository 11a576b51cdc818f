"""Read logs of any size into signals, series and tracebacks with bounded memory.

The first pass (`triage.readers.log_prefilter`) reads each file in stretches, on every
core (`triage.readers.log_chunks`), and hands over the lines that hold an anchor with their
context, and the runs of frequent lines already counted per series. Here they become what
rules read, each line by what it is worth (`signatures.Retention`), never by where it sits:

- decisive lines (NCCL WARN, errors, timeouts, exits) are kept wherever they are, the
  first and last few per signature and writer; repeats beyond those are counted;
- frequent lines (NCCL's per-op COLL lines) become series (`triage.readers.log_series`):
  a count, the first and last lines and so the last value per communicator;
- lines that hold an anchor but match no signature are noise, and counted.

Memory is bounded by writers, signatures and series, not by the file. Multi-line blocks
(tracebacks, stack dumps, launcher reports) are read by `triage.readers.log_blocks`.
Torchelastic's error files (JSON holding a message and a traceback) are read as the text
they hold.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.observations import LogSignal, RankState, TracebackRecord
from triage.observations.log_lines import is_printed
from triage.readers import log_dress, log_wrap, signatures
from triage.readers.log_blocks import BlockParser, Origin, placeholder_pid
from triage.readers.log_chunks import scan_stretches
from triage.readers.log_prefilter import MAX_LINE, RangeScan, last_lines
from triage.readers.log_runs import writer_of
from triage.readers.log_series import SeriesBook, Tally
from triage.readers.object_bounds import check_json
from triage.readers.stacks import classify

MAX_ERROR_FILE = 16 << 20
PER_KEY_FIRST = 3
PER_KEY_LAST = 12
#: Lines kept of where each file ends.
TAIL_LINES = 4

_RANK_PREFIX = re.compile(r"^\[(?P<role>[A-Za-z_]+?)(?P<n>\d+)\]:\s?")
# `grep -r NCCL logs/` puts the file's name first: `LOG1.0.txt:host:pid:tid [dev] NCCL ...`.
_NCCL_PREFIX = re.compile(
    r"^(?:[^\s:]+\.(?:log|txt|out|err):)?(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
)
# Open MPI's and Horovod's --tag-output: `[1,3]<stderr>:` (job, rank), `[3]<stdout>:`.
_MPI_PREFIX = re.compile(r"^(?:\[(?:\d+,)?(?P<n>\d+)\])?<(?:stdout|stderr)>:\s?")
# Ray's driver prefixes what each actor or task prints with its name and process, and its
# log deduplication appends a count: `(WorkerDict pid=1751030, ip=10.65.194.91) Traceback
# ...`, `(pid=4121) ...`, `(RayTrainWorker pid=88, ip=10.0.0.2) ... [repeated 7x across
# cluster]` (verl, OpenRLHF, Ray Train, vLLM on Ray); coloured, and pasted from a page that
# dropped the escape character, it is `[36m(main_task pid=163292)[0m`.
_RAY_PREFIX = re.compile(
    r"^(?:\[\d{1,2}m)?\((?:[\w.:<>\-]+ )?pid=(?P<pid>\d+)(?:, ip=[\w.:\-]+)?\)(?:\[0m)? ?"
)
_RAY_REPEATS = re.compile(r" \[repeated \d+x across cluster\]$")
_INLINE_RANK = re.compile(r"\[[Rr]ank ?(?P<n>\d+)\]")
_FILE_RANK = re.compile(r"(?i)(?:^|[^a-z])rank[_\-.]?(?P<n>\d+)")
_ELASTIC_DIR = re.compile(
    r"attempt_\d+/(?P<n>\d+)/(?:stdout|stderr)\.log$|/(?P<e>\d+)/error\.json$"
)


@dataclass
class ScanResult:
    """Everything one file yielded."""

    path: str
    size: int
    lines: int = 0
    signals: list[LogSignal] = field(default_factory=list)
    tracebacks: list[TracebackRecord] = field(default_factory=list)
    #: Decisive lines counted but not kept: repeats beyond the first and last of their kind.
    dropped: int = 0
    #: Frequent lines, per series; their first and last lines are among `signals`.
    series: list[Tally] = field(default_factory=list)
    #: Lines that held an anchor and matched no signature.
    noise: int = 0
    #: Its last few non-empty lines, in order.
    tail: list[str] = field(default_factory=list)
    #: The rank torchelastic's folder (`attempt_0/3/`) names, once the report ties it.
    folder_rank: int | None = None
    #: The width a terminal cut this file's lines at (they were read joined), if it did.
    unwrapped: int | None = None

    @property
    def last_line(self) -> str:
        """Where the file stops: its last non-empty line."""
        return self.tail[-1] if self.tail else ""

    @property
    def rank(self) -> int | None:
        """The rank whose log this is: named by the file or its torchelastic folder, or the
        one rank its lines name."""
        named = file_origin(self.path).rank
        if named is not None or self.folder_rank is not None:
            return named if named is not None else self.folder_rank
        # a rank's own print (`rank 3: amp=True`) may sit in any file: it names no writer
        ranks = {s.rank for s in self.signals if not is_printed(s.signature)}
        ranks |= {t.rank for t in self.tracebacks}
        ranks.discard(None)
        return ranks.pop() if len(ranks) == 1 else None

    @property
    def aggregated(self) -> int:
        """Frequent lines folded into series."""
        return sum(tally.count for tally in self.series)


def file_origin(path: str) -> Origin:
    """The rank a file's name or folder names: `rank3.log`, torchelastic's `attempt_0/3/`."""
    name = Path(path).name
    origin = Origin()
    found = _FILE_RANK.search(name)
    if found:
        origin.rank = int(found.group("n"))
    elastic = _ELASTIC_DIR.search(path.replace("\\", "/"))
    if elastic:
        origin.local_rank = int(elastic.group("n") or elastic.group("e"))
    return origin


def split_prefix(line: str, base: Origin) -> tuple[str, Origin]:
    """Strip Ray's `(Actor pid=N, ip=..)`, MPI's `[1,3]<stderr>:`, `[rank3]:`, `[default3]:`
    and NCCL's `host:pid:tid [dev]` prefixes into an Origin."""
    origin = Origin(base.rank, base.local_rank, base.host, base.pid, base.device)
    ray = _RAY_PREFIX.match(line) if line[:1] in "([" else None
    if ray:
        origin.pid = int(ray.group("pid"))
        line = _RAY_REPEATS.sub("", line[ray.end() :])
    mpi = _MPI_PREFIX.match(line)
    if mpi:
        origin.rank = int(mpi.group("n")) if mpi.group("n") is not None else origin.rank
        line = line[mpi.end() :]
    while found := _RANK_PREFIX.match(line):  # torchrun may stack `[default2]:[rank2]:`
        number = int(found.group("n"))
        if found.group("role").lower() == "rank":
            origin.rank = number
        else:
            origin.local_rank = number
        line = line[found.end() :]
    nccl = _NCCL_PREFIX.match(line)
    if nccl:
        origin.host, origin.pid = nccl.group("host"), int(nccl.group("pid"))
        origin.device = int(nccl.group("dev"))
        line = line[nccl.end() :]
    if origin.rank is None:
        inline = _INLINE_RANK.search(line)
        if inline:
            origin.rank = int(inline.group("n"))
    return line, origin


def scan_file(path: Path, source: Path | None = None) -> ScanResult:
    """Signals and tracebacks of one file; `source` names the file it was extracted from
    (its name and folder still tell the rank)."""
    reader = _Reader(path, source or path)
    for _, scan in scan_stretches([(path, path.stat().st_size)]):
        reader.read(scan)
    result = reader.finish()
    learn_ranks([result])
    return result


def scan_files(paths: Sequence[Path]) -> list[ScanResult | OSError]:
    """Every log, in order, read on every core; a file that cannot be read is its error.
    Torchelastic's error files are JSON holding a message and a traceback: those are read
    as text. Ranks are learned across all the files."""
    out: list[ScanResult | OSError | None] = []
    readers: deque[tuple[int, int, _Reader]] = deque()  # (index in `plain`, in `out`, reader)
    plain: list[tuple[Path, int]] = []
    for path in paths:
        try:
            size = path.stat().st_size
            elastic = _elastic_error(path, size) or _unwrapped(path, size)
            reader = _Reader(path, path) if elastic is None else None
        except OSError as exc:
            out.append(exc)
            continue
        if reader is not None:
            readers.append((len(plain), len(out), reader))
            plain.append((path, size))
        out.append(elastic)
    for index, scan in scan_stretches(plain):
        while readers[0][0] < index:  # a file's stretches come together: this one is done
            _, place, reader = readers.popleft()
            out[place] = reader.error or reader.finish()
        readers[0][2].read(scan)
    for _, place, reader in readers:
        out[place] = reader.error or reader.finish()
    done = [item for item in out if item is not None]
    learn_ranks([item for item in done if isinstance(item, ScanResult)])
    return done


def _elastic_error(path: Path, size: int) -> ScanResult | None:
    """A torchelastic error file read as the text it holds; None for any other file."""
    if size > MAX_ERROR_FILE or path.suffix != ".json":
        return None
    try:
        text = path.read_text(errors="replace")
        check_json(text)
        payload = json.loads(text)
    except (ValueError, UnicodeDecodeError):  # TooManyObjects among them
        return None
    if isinstance(payload, dict) and isinstance(payload.get("message"), (dict, str)):
        return _scan_elastic_error(path, payload)
    return None


def _scan_elastic_error(path: Path, payload: dict[str, Any]) -> ScanResult:
    message = payload["message"]
    parts = (
        [message]
        if isinstance(message, str)
        else [
            str(message.get("message", "")),
            str(message.get("extraInfo", {}).get("py_callstack", "")),
        ]
    )
    with tempfile.TemporaryDirectory(prefix="triage-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text("\n".join(parts))
        return scan_file(copy, source=path)


def _unwrapped(path: Path, size: int) -> ScanResult | None:
    """A file whose lines a terminal cut at its width, read with them joined again; its
    signals and tracebacks keep the numbers of the lines they start at in the file."""
    width = log_wrap.wrap_width(path, size)
    if width is None:
        return None
    with tempfile.TemporaryDirectory(prefix="triage-") as tmp:
        copy = Path(tmp) / path.name
        origin, total = log_wrap.unwrap(path, width, copy)
        result = scan_file(copy, source=path)
    for signal in result.signals:
        signal.line = _first_of(origin, signal.line)
    for record in result.tracebacks:
        record.line = _first_of(origin, record.line)
    result.lines, result.unwrapped = total, width
    return result


def _first_of(origin: list[int], joined: int) -> int:
    """The file's number of the first line a joined line was made of."""
    return origin[joined - 1] if 0 < joined <= len(origin) else joined


def dump_state(record: TracebackRecord) -> RankState | None:
    """A dump of a main thread as a RankState; None for tracebacks and threading's threads.

    The dump's pid when it names one (py-spy's `Process N:`, NCCL prefixes), else a stable
    negative placeholder: -1 - rank, or derived from where the dump sits in its file.
    """
    if not record.dump or not record.frames:
        return None
    outermost = record.frames[-1]
    function = outermost.function.rsplit(".", 1)[-1]  # py-spy says `Thread._bootstrap`
    if outermost.file.endswith("threading.py") and function.startswith("_bootstrap"):
        return None
    if record.pid is not None:
        pid = record.pid
    elif record.rank is not None:
        pid = -1 - record.rank
    else:
        pid = placeholder_pid(record.path, record.line)
    return classify(record.frames, pid=pid, rank=record.rank, host=record.host or "")


#: A matched line before it becomes a LogSignal: (signature, fields, text, line, origin).
_Match = tuple[signatures.Signature, dict[str, Any], str, int, Origin]


def _signal(match: _Match, path: str) -> LogSignal:
    sig, fields, text, number, origin = match
    return LogSignal(
        signature=sig.name,
        text=text[:MAX_LINE].strip(),
        path=path,
        line=number,
        rank=_rank(origin, fields),
        local_rank=origin.local_rank,
        host=origin.host,
        pid=origin.pid,
        device=origin.device,
        peer_symptom=sig.peer_symptom,
        fields=fields,
    )


def _rank(origin: Origin, fields: dict[str, Any]) -> int | None:
    """The rank a line's prefix names, else the one its own text names."""
    named = fields.get("rank")
    if origin.rank is None and isinstance(named, (int, str)) and str(named).isdigit():
        return int(named)
    return origin.rank


class _Bounded:
    """The first and the last few signals per (signature, writer): 1M identical lines read
    as 15, and the rest are counted. Only the kept ones become LogSignals."""

    def __init__(self) -> None:
        self.first: dict[tuple[object, ...], list[_Match]] = {}
        self.last: dict[tuple[object, ...], deque[_Match]] = {}
        self.dropped = 0

    def add(self, match: _Match) -> None:
        sig, fields, _, _, origin = match
        key = (sig.name, _rank(origin, fields), origin.local_rank, origin.pid)
        first = self.first.setdefault(key, [])
        if len(first) < PER_KEY_FIRST:
            first.append(match)
            return
        last = self.last.setdefault(key, deque(maxlen=PER_KEY_LAST))
        self.dropped += len(last) == PER_KEY_LAST
        last.append(match)

    def signals(self, path: str) -> list[LogSignal]:
        return [
            _signal(match, path)
            for key, first in self.first.items()
            for match in first + list(self.last.get(key, ()))
        ]


class _Reader:
    """One file's stretches, in file order, into its ScanResult."""

    def __init__(self, path: Path, named: Path) -> None:
        self.path = str(named)
        self.result = ScanResult(path=self.path, size=named.stat().st_size)
        self.result.tail = last_lines(path, TAIL_LINES)
        self.origin = file_origin(self.path)
        self.dress = log_dress.detect(path)
        self.parser = BlockParser(self.path)
        self.bounded = _Bounded()
        self.book = SeriesBook()
        self.base = 0  # newlines before the stretch being read
        self.fed = 0  # the last line the block parser saw
        self.unterminated = False
        self.error: OSError | None = None
        #: Lines the fast pass counted into a series without reading them: their other
        #: signatures (a NaN loss on a step line) are read when the series keeps them.
        self.counted: set[int] = set()

    def read(self, scan: RangeScan) -> None:
        if scan.error or self.error:
            self.error = self.error or OSError(0, scan.error)
            return
        for number, worn, anchored in scan.hits:
            raw = self._undress(worn)
            text, origin = split_prefix(raw, self.origin)
            found = self._match(self.base + number, text, origin, raw)
            self.result.noise += anchored and not found
            self._feed(self.base + number, text, origin)
        for number, raw in scan.overflow:
            if self.base + number > self.fed:
                self._feed(self.base + number, *self._split(raw))
        for key, part in scan.series.items():
            self.book.add_count(key, part.count)
            for number, raw in dict(part.first + part.last).items():
                self.counted.add(self.base + number)
                self.book.add((self.base + number, raw), key, counted=False)
        self.book.close_stretch()
        self.base += scan.newlines
        self.unterminated = scan.unterminated

    def finish(self) -> ScanResult:
        self.parser.reset()
        for number, text, origin in self.parser.joined:
            self._match(number, text, origin)
        self.book.close_stretch()
        result = self.result
        result.lines = self.base + self.unterminated
        result.series = [t for t in self.book.tallies.values() if self._read_series(t)]
        kept = self.bounded.signals(self.path) + [s for t in result.series for s in t.signals]
        result.signals = sorted(kept, key=lambda s: s.line)
        result.tracebacks = self.parser.records
        result.dropped = self.bounded.dropped
        return result

    def _match(self, number: int, text: str, origin: Origin, raw: str = "") -> bool:
        """Signals of one line, each kept by its signature's retention (`raw`: the line
        with its prefixes, which name the writer of a series)."""
        found = False
        for sig, fields in signatures.matches(text):
            found = True
            if sig.series is None:
                self.bounded.add((sig, fields, text, number, origin))
            else:
                key = (sig.name, writer_of(raw), str(sig.series.value_of(fields)))
                self.book.add((number, raw), key)
        return found

    def _read_series(self, tally: Tally) -> bool:
        """Read a series' kept lines into signals; a line that holds the series' token but
        does not parse (cut short) is left out, and a series with no line left with it. A
        kept line the fast pass only counted is read for its other signatures too (the
        training log whose step lines turn to `loss: nan`)."""
        sig = signatures.SIGNATURES[tally.signature]
        for number, raw in tally.kept():
            text, origin = self._split(raw)
            fields = sig.match(text)
            if fields is not None:
                tally.signals.append(_signal((sig, fields, text, number, origin), self.path))
            if number in self.counted:
                for other, other_fields in signatures.matches(text):
                    if other.series is None:
                        self.bounded.add((other, other_fields, text, number, origin))
        return bool(tally.signals)

    def _undress(self, worn: str) -> str:
        """A line without what the file's collector or paste put around every line."""
        return self.dress.undress(worn) if self.dress else worn

    def _split(self, worn: str) -> tuple[str, Origin]:
        """A line without the file's dress and the writer's prefixes, and its writer."""
        return split_prefix(self._undress(worn), self.origin)

    def _feed(self, number: int, text: str, origin: Origin) -> None:
        """A line for the block parsers, once, in order; a gap closes the open blocks."""
        if number <= self.fed:
            return
        if number != self.fed + 1:
            self.parser.reset()
        self.parser.feed(number, text, origin)
        self.fed = number


def learn_ranks(results: list[ScanResult]) -> None:
    """Give every line its global rank when some line ties its writer to one.

    NCCL lines carry a pid and NCCL's init lines tie the pid to a rank; torchrun's
    `[default1]:` prefix is a local rank and its failure report ties local ranks to ranks.
    The ties may sit in other files (per-pid NCCL files beside per-rank logs).
    """
    by_pid: dict[object, int] = {}
    by_local: dict[object, set[int]] = {}
    hosts: set[str | None] = set()
    for result in results:
        for s in result.signals:
            rank = str(s.fields.get("rank", s.rank))
            if not rank.isdigit():
                continue
            pid = s.pid if s.pid is not None else s.fields.get("pid")
            if pid is not None and str(pid).isdigit():
                by_pid[(s.host, int(pid))] = by_pid[int(pid)] = int(rank)
            local = s.fields.get("local_rank")
            if local is not None and str(local).isdigit():
                host = s.fields.get("host", s.host)
                if host is not None:
                    hosts.add(host)
                by_local.setdefault(int(local), set()).add(int(rank))
    one_node = len(hosts) <= 1
    for result in results:
        local = file_origin(result.path).local_rank
        if local is not None and one_node and len(by_local.get(local, ())) == 1:
            result.folder_rank = next(iter(by_local[local]))
        items: list[LogSignal | TracebackRecord] = [*result.signals, *result.tracebacks]
        for item in items:
            if item.rank is not None:
                continue
            pid = item.pid if item.pid is not None else getattr(item, "fields", {}).get("pid")
            if pid is not None and str(pid).isdigit():
                item.rank = by_pid.get((item.host, int(pid)), by_pid.get(int(pid)))
            if item.rank is None and item.local_rank is not None and one_node:
                candidates = by_local.get(item.local_rank, set())
                item.rank = next(iter(candidates)) if len(candidates) == 1 else None
