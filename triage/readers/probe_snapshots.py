"""Reading triage.probe snapshot files: heads, whole snapshots, and one summary each.

`triage.probe.snapshot(model, optimizer, tag=...)` writes one JSON file per rank and call
with a checksum, sum, norm and NaN/Inf count of every parameter, gradient and buffer
(the local shard of a DTensor), its placements and mesh, the wrappers around the model
and the stacks. The head of a file (rank, pid, call, tag, time) decides how snapshots
group before any tensor is read: one process per rank (the latest, when a rank
restarted), grouped by tag when the ranks tag their calls, else by call index. Each
snapshot then reads as a bounded summary; one taken on the signal also gives the main
thread's stack. Comparing the ranks is `triage.readers.replica_comparison`.

Most of a snapshot is its tensor records, and on replicas (DDP, a plain model) every rank
writes the same record, byte for byte, for each parameter. `SnapshotReader` splits the
tensor list at the separators the probe writes, validates each distinct record once and
hands the same object to every rank that wrote it: a model per record per rank made
1,024 ranks x 500 parameters take tens of seconds. A file the split does not fit exactly
(another writer, an escape in it, an invalid record, records of a sharded model beyond
what the reader keeps) is read whole, as before, with the same result and errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from triage.observations import (
    Frame,
    ProbeSnapshot,
    RankState,
    SnapshotSummary,
    TensorRecord,
)
from triage.readers.object_bounds import TooManyObjects, check_json
from triage.readers.stacks import classify, is_user_code

MAX_BYTES = 512 << 20
MAX_NAMES = 8
MAX_MESH_RANKS = 256
#: Distinct tensor records one reader keeps (about 6 KB each): every record of a model
#: of that many tensors. A sharded model's records differ on every rank; once the reader
#: holds this many, files with records it has not seen are read whole.
MAX_RECORDS = 4096
#: Distinct tensor lists one reader shares (the replicas' list, and a few outliers').
MAX_LISTS = 8
_MAIN_THREAD = "MainThread"
#: How the probe writes the tensor list (json.dumps' default separators).
_TENSORS_KEY = b'"tensors"'
_TENSORS = b'"tensors": ['
_FIRST_RECORD = b'{"name": '
_NEXT_RECORD = b', {"name": '


class SnapshotHead(BaseModel):
    """The few fields that decide how snapshots group, read before the tensors."""

    model_config = ConfigDict(extra="ignore")

    rank: int | None = None
    pid: int = 0
    call: int = 0
    tag: str | None = None
    time: float = 0.0


class UnusableSnapshot(Exception):
    """A file that cannot be read as a snapshot (too big, unreadable, invalid)."""


@dataclass
class Choice:
    """The snapshots to compare, and those left out: files of an earlier process of a rank
    (a restart, an older run into the same folder) and files without a rank."""

    chosen: list[tuple[str, SnapshotHead]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    unranked: list[str] = field(default_factory=list)


def read_bytes(path: str) -> bytes:
    """A snapshot file's bytes, up to MAX_BYTES and as many containers as its size allows
    (`triage.readers.object_bounds`); raises UnusableSnapshot."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_BYTES:
            raise UnusableSnapshot(f"over the {MAX_BYTES}-byte limit for snapshots: not read")
        data = Path(path).read_bytes()
        check_json(data)
    except OSError as exc:
        raise UnusableSnapshot(f"cannot read: {exc.strerror or exc}") from None
    except TooManyObjects as exc:
        raise UnusableSnapshot(str(exc)) from None
    return data


def _invalid(exc: ValidationError) -> UnusableSnapshot:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    reason = error["msg"] + (f" at {where}" if where else "")
    return UnusableSnapshot(f"not a valid triage.probe/1 snapshot: {reason}"[:300])


@dataclass
class _TensorCounts:
    """What a summary counts in a tensor list (one count per list a reader shares)."""

    parameters: int
    buffers: int
    grads: int
    without_grad: list[str]
    nonfinite: list[str]


@dataclass
class _SharedList:
    """A tensor list as a file wrote it, its records, and their counts once summarized."""

    text: bytes
    records: list[TensorRecord]
    counts: _TensorCounts | None = None


class SnapshotReader:
    """Reads the snapshots of one job, validating each distinct tensor record once.

    It holds, for one tool run, up to MAX_RECORDS records and the first MAX_LISTS distinct
    tensor lists (a replica's list is the same text on every rank): snapshots with the
    same list share its objects, which nothing may change.
    """

    def __init__(self) -> None:
        self._records: dict[bytes, TensorRecord] = {}
        self._lists: list[_SharedList] = []
        self._by_records: dict[int, _SharedList] = {}

    def heads(
        self, paths: list[str]
    ) -> tuple[list[tuple[str, SnapshotHead]], list[tuple[str, str]]]:
        """Each readable file's head, and (path, reason) for each file that is not a
        snapshot: its JSON must parse whole; the rest is checked when it is loaded."""
        heads = []
        unreadable = []
        for path in paths:
            try:
                heads.append((path, self._head(read_bytes(path))))
            except ValidationError as exc:
                unreadable.append((path, str(_invalid(exc))))
            except UnusableSnapshot as exc:
                unreadable.append((path, str(exc)))
        return heads, unreadable

    def _head(self, data: bytes) -> SnapshotHead:
        """The head, from the file without its tensor records when they split out; an
        invalid file is read whole, for the error (and its position) a whole read gives."""
        split = self._split(data)
        if split is not None:
            try:
                return SnapshotHead.model_validate_json(split[0])
            except ValidationError:
                pass
        return SnapshotHead.model_validate_json(data)

    def load(self, path: str) -> ProbeSnapshot:
        """The whole snapshot; raises UnusableSnapshot."""
        data = read_bytes(path)
        split = self._split(data)
        if split is not None and not _unicode_escape(data):  # none spells another "tensors"
            try:
                snapshot = ProbeSnapshot.model_validate_json(split[0])
            except ValidationError:
                snapshot = None  # read whole below, for the error a whole read gives
            if snapshot is not None and _own_tensors(snapshot):
                snapshot.tensors = split[1]
                return snapshot
        try:
            return ProbeSnapshot.model_validate_json(data)
        except ValidationError as exc:
            raise _invalid(exc) from None

    def shares(self, snapshot: ProbeSnapshot) -> bool:
        """Whether the snapshot's tensor list is one the reader hands to every snapshot
        that wrote it (and keeps while it reads)."""
        return id(snapshot.tensors) in self._by_records

    def summarize(self, snapshot: ProbeSnapshot, path: str, label: str) -> SnapshotSummary:
        """`summarize`, counting a list that other snapshots share once."""
        shared = self._by_records.get(id(snapshot.tensors))
        if shared is None:
            return summarize(snapshot, path, label)
        if shared.counts is None:
            shared.counts = _count(shared.records)
        return summarize(snapshot, path, label, shared.counts)

    def _split(self, data: bytes) -> tuple[bytes, list[TensorRecord]] | None:
        """The file with an empty tensor list, and the records taken out of it, when the
        list is written the probe's way and each record is valid; else None.

        The file is then valid JSON exactly when the rest is (an empty list filled with
        complete values), and reads as the rest with those records in that list.
        """
        at = data.find(_TENSORS)
        if at < 0:
            return None
        start = at + len(_TENSORS)
        end = start
        if not data.startswith(b"]", start):
            if not data.startswith(_FIRST_RECORD, start):
                return None
            last = max(data.rfind(_NEXT_RECORD, start), start)
            end = data.find(b"}]", last) + 1
            if end <= 0:
                return None
        if data.count(_TENSORS_KEY, 0, start) != 1 or data.find(_TENSORS_KEY, end) >= 0:
            return None  # another key of that name: the records may not be the snapshot's
        records = self._records_of(data[start:end])
        return None if records is None else (data[:start] + data[end:], records)

    def _records_of(self, text: bytes) -> list[TensorRecord] | None:
        """The records of one list's text (`{"name": ...}, {"name": ...}`); None when one
        is invalid, or new while the reader holds MAX_RECORDS already (validated one by
        one, a sharded model's records cost more than the whole file's validation)."""
        for shared in self._lists:
            if shared.text == text:
                return shared.records
        records = []
        if text:
            for piece in text[len(_FIRST_RECORD) :].split(_NEXT_RECORD):
                record = self._records.get(piece)
                if record is None:
                    if len(self._records) >= MAX_RECORDS:
                        return None
                    try:
                        record = TensorRecord.model_validate_json(_FIRST_RECORD + piece)
                    except ValidationError:
                        return None
                    self._records[piece] = record
                records.append(record)
        if len(self._lists) < MAX_LISTS:
            shared = _SharedList(text, records)
            self._lists.append(shared)
            self._by_records[id(records)] = shared
        return records


def _unicode_escape(data: bytes) -> bool:
    """Whether a JSON text holds a \\u escape (a search for the two bytes is slow)."""
    at = data.find(b"\\")
    while at >= 0:
        if data.startswith(b"u", at + 1):
            return True
        at = data.find(b"\\", at + 2)
    return False


def _own_tensors(snapshot: ProbeSnapshot) -> bool:
    """Whether the list split out is the snapshot's `tensors`: given at the top level (its
    key is the file's only "tensors", so not one in the optimizer's record) and empty."""
    return "tensors" in snapshot.model_fields_set and not snapshot.tensors


def choose(heads: list[tuple[str, SnapshotHead]]) -> Choice:
    """One process per rank: when a rank restarted (torchrun restarts, a rerun into the same
    folder), the latest process is the one that showed the problem; the others are left out,
    and so are snapshots without a rank (torch.distributed not initialised)."""
    latest: dict[int | None, tuple[float, int]] = {}
    for _, head in heads:
        if head.rank is None:
            continue
        mark = (head.time, head.pid)
        if head.rank not in latest or mark > latest[head.rank]:
            latest[head.rank] = mark
    newest_pid = {rank: pid for rank, (_, pid) in latest.items()}
    choice = Choice()
    for path, head in heads:
        if head.rank is not None and head.pid != newest_pid[head.rank]:
            choice.dropped.append(path)
        else:
            choice.chosen.append((path, head))
    choice.unranked = [path for path, head in choice.chosen if head.rank is None]
    return choice


def tags_align(heads: list[tuple[str, SnapshotHead]]) -> bool:
    """Group by tag when every snapshot has one and no rank used a tag twice: tags survive
    ranks that snapshot a different number of times (a conditional extra call)."""
    seen: set[tuple[int | None, str]] = set()
    for _, head in heads:
        if head.tag is None or (head.rank, head.tag) in seen:
            return False
        seen.add((head.rank, head.tag))
    return True


def call_label(head: SnapshotHead, by_tag: bool) -> str:
    """The name of the call a snapshot belongs to: its tag, or `call N`."""
    return str(head.tag) if by_tag else f"call {head.call}"


def _count(tensors: list[TensorRecord]) -> _TensorCounts:
    trainable = [t for t in tensors if t.kind == "parameter" and t.requires_grad]
    with_grad = [t for t in trainable if t.grad is not None]
    without = [t.name for t in trainable if t.grad is None] if with_grad else []
    nonfinite = [
        f"{t.name} ({part})"
        for t in tensors
        for part, stats in (("value", t.value), ("grad", t.grad))
        if stats is not None and stats.nonfinite
    ]
    parameters = sum(1 for t in tensors if t.kind == "parameter")
    buffers = sum(1 for t in tensors if t.kind == "buffer")
    return _TensorCounts(parameters, buffers, len(with_grad), without, nonfinite)


def summarize(
    snapshot: ProbeSnapshot, path: str, label: str, counts: _TensorCounts | None = None
) -> SnapshotSummary:
    """One snapshot, bounded: counts, the first names of what lacks a gradient or holds
    NaN/Inf, the optimizer, and the user line it was taken at. `counts`: its tensors',
    counted already."""
    counts = counts or _count(snapshot.tensors)
    optimizer = snapshot.optimizer or {}
    return SnapshotSummary(
        path=path,
        rank=snapshot.rank,
        world_size=snapshot.world_size,
        call=snapshot.call,
        tag=snapshot.tag,
        label=label,
        reason=snapshot.reason,
        host=snapshot.host,
        pid=snapshot.pid,
        backend=snapshot.backend,
        model=snapshot.model,
        wrappers=snapshot.wrappers,
        meshes=snapshot.meshes
        if sum(len(m.ranks) for m in snapshot.meshes) <= MAX_MESH_RANKS
        else [],
        parameters=counts.parameters,
        buffers=counts.buffers,
        grads=counts.grads,
        optimizer=str(optimizer["class"]) if "class" in optimizer else None,
        optimizer_state=_int(optimizer.get("state_tensors")),
        without_grad=counts.without_grad[:MAX_NAMES],
        without_grad_total=len(counts.without_grad),
        nonfinite=counts.nonfinite[:MAX_NAMES],
        nonfinite_total=len(counts.nonfinite),
        user_frame=user_frame(snapshot),
        flight_recorder=snapshot.flight_recorder,
        errors=snapshot.errors[:MAX_NAMES],
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def user_frame(snapshot: ProbeSnapshot) -> Frame | None:
    """The innermost user frame of the main thread (the probe leaves its own frames out):
    the line of the training loop that called snapshot(), or where it was on a signal."""
    if not snapshot.stacks:
        return None
    main = next((s for s in snapshot.stacks if s.thread == _MAIN_THREAD), snapshot.stacks[0])
    return next((f for f in main.frames if is_user_code(f.file)), None)


def signal_stack(snapshot: ProbeSnapshot) -> RankState | None:
    """A snapshot taken on the signal holds the main thread where it is blocked: the same
    state py-spy gives, for hosts where py-spy may not attach (no ptrace). A live py-spy
    stack of the same rank still wins (see triage.grouping.latest_stacks)."""
    main = next((s for s in snapshot.stacks if s.thread == _MAIN_THREAD), None)
    if main is None or not main.frames:
        return None
    state = classify(main.frames, pid=snapshot.pid, rank=snapshot.rank, host=snapshot.host)
    state.thread = main.thread
    return state
