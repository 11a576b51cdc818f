"""Reading triage.probe snapshot files: heads, whole snapshots, and one summary each.

`triage.probe.snapshot(model, optimizer, tag=...)` writes one JSON file per rank and call
with a checksum, sum, norm and NaN/Inf count of every parameter, gradient and buffer
(the local shard of a DTensor), its placements and mesh, the wrappers around the model
and the stacks. The head of a file (rank, pid, call, tag, time) decides how snapshots
group before any tensor is read: one process per rank (the latest, when a rank
restarted), grouped by tag when the ranks tag their calls, else by call index. Each
snapshot then reads as a bounded summary; one taken on the signal also gives the main
thread's stack. Comparing the ranks is `triage.readers.replica_comparison`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from triage.observations import Frame, ProbeSnapshot, RankState, SnapshotSummary
from triage.readers.stacks import classify, is_user_code

MAX_BYTES = 512 << 20
MAX_NAMES = 8
MAX_MESH_RANKS = 256
_MAIN_THREAD = "MainThread"


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
    """A snapshot file's bytes, up to MAX_BYTES; raises UnusableSnapshot."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_BYTES:
            raise UnusableSnapshot(f"over the {MAX_BYTES}-byte limit for snapshots: not read")
        return Path(path).read_bytes()
    except OSError as exc:
        raise UnusableSnapshot(f"cannot read: {exc.strerror or exc}") from None


def _invalid(exc: ValidationError) -> UnusableSnapshot:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    reason = error["msg"] + (f" at {where}" if where else "")
    return UnusableSnapshot(f"not a valid triage.probe/1 snapshot: {reason}"[:300])


def read_heads(
    paths: list[str],
) -> tuple[list[tuple[str, SnapshotHead]], list[tuple[str, str]]]:
    """Each readable file's head, and (path, reason) for each file that is not a snapshot."""
    heads = []
    unreadable = []
    for path in paths:
        try:
            heads.append((path, SnapshotHead.model_validate_json(read_bytes(path))))
        except ValidationError as exc:
            unreadable.append((path, str(_invalid(exc))))
        except UnusableSnapshot as exc:
            unreadable.append((path, str(exc)))
    return heads, unreadable


def load_snapshot(path: str) -> ProbeSnapshot:
    """The whole snapshot; raises UnusableSnapshot."""
    try:
        return ProbeSnapshot.model_validate_json(read_bytes(path))
    except ValidationError as exc:
        raise _invalid(exc) from None


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


def summarize(snapshot: ProbeSnapshot, path: str, label: str) -> SnapshotSummary:
    """One snapshot, bounded: counts, the first names of what lacks a gradient or holds
    NaN/Inf, the optimizer, and the user line it was taken at."""
    trainable = [t for t in snapshot.tensors if t.kind == "parameter" and t.requires_grad]
    with_grad = [t for t in trainable if t.grad is not None]
    without = [t.name for t in trainable if t.grad is None] if with_grad else []
    nonfinite = [
        f"{t.name} ({part})"
        for t in snapshot.tensors
        for part, stats in (("value", t.value), ("grad", t.grad))
        if stats is not None and stats.nonfinite
    ]
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
        parameters=sum(1 for t in snapshot.tensors if t.kind == "parameter"),
        buffers=sum(1 for t in snapshot.tensors if t.kind == "buffer"),
        grads=len(with_grad),
        optimizer=str(optimizer["class"]) if "class" in optimizer else None,
        optimizer_state=_int(optimizer.get("state_tensors")),
        without_grad=without[:MAX_NAMES],
        without_grad_total=len(without),
        nonfinite=nonfinite[:MAX_NAMES],
        nonfinite_total=len(nonfinite),
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
