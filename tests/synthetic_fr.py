"""Flight Recorder dumps as torch's NCCL backend writes them, for tests and benchmarks.

A CPU-only machine cannot run NCCL, so the NCCL-only paths (started/completed states,
point-to-point ops, a rank whose dump is missing, thousands of ranks) are covered by
dumps written here. They follow torch's schema (``FlightRecorderDetail.hpp``): one dict
per rank with ``version``, ``pg_config`` (group name -> name, desc, global ranks as a
string), ``comm_lib_version`` (``nccl_version`` before 2.10), ``pg_status`` (per local
pg id) and ``entries``, each entry with torch's keys in torch's order. Pickles are
written the way torch's C++ pickler writes them (protocol 2, strings and frame dicts
memoized, containers not), so a reader sees the same bytes it would see from a job;
JSON the way ``_dump_fr_trace_json`` writes it (no frames, pg_status values as strings,
0 for unset times, keys sorted). File names follow ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``:
a prefix (``/tmp/nccl_trace_rank_`` by default) with the rank appended.

Ranks with identical histories share one encoding, so 4,096 rank files cost a few
encodings, not 4,096.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DEFAULT_PREFIX = "nccl_trace_rank_"
TORCH_FRAMES = (
    ("all_reduce", "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", 2950),
    ("wrapper", "/usr/lib/python3/site-packages/torch/distributed/c10d_logger.py", 83),
)
USER_FILE = "/job/train.py"

Sizes = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Call:
    """One recorded op on one rank: a collective, a send or a recv.

    ``peer`` is the global rank at the other end of a send/recv; ``line`` the user line
    that called it (the frame the analysis must report); ``state`` what the watchdog last
    saw: ``completed``, ``started`` (the kernel runs, waiting for peers) or ``scheduled``
    (enqueued, the GPU has not reached it).
    """

    op: str
    group: str = "0"
    sizes: Sizes = ((1024, 1024),)
    out_sizes: Sizes | None = None
    dtype: str = "Float"
    peer: int | None = None
    state: str = "completed"
    line: int = 40
    function: str = "train_step"

    @property
    def is_p2p(self) -> bool:
        return self.op in ("send", "recv")


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass
class Job:
    """A job's process groups and every rank's call history."""

    world_size: int
    groups: list[Group] = field(default_factory=list)
    version: str = "2.10"
    backend: str = "nccl"

    def __post_init__(self) -> None:
        if not self.groups:
            self.groups = [Group("0", "default_pg", tuple(range(self.world_size)))]

    def member_groups(self, rank: int) -> list[Group]:
        return [g for g in self.groups if rank in g.ranks]


# --- one rank's dump, as a dict in torch's schema ----------------------------------------


def _frames(call: Call, cache: dict[tuple[str, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Innermost first, the same dict objects for the same site: torch shares them too."""
    key = (call.function, call.line)
    if key not in cache:
        torch_frames = [
            {"name": call.op if i == 0 else name, "filename": path, "line": line}
            for i, (name, path, line) in enumerate(TORCH_FRAMES)
        ]
        cache[key] = [
            *torch_frames,
            {"name": call.function, "filename": USER_FILE, "line": call.line},
            {"name": "main", "filename": USER_FILE, "line": 120},
            {"name": "<module>", "filename": USER_FILE, "line": 131},
        ]
    return cache[key]


def rank_dump(job: Job, rank: int, calls: Sequence[Call]) -> dict[str, Any]:
    """The dict torch dumps for `rank` after it made `calls`, oldest first."""
    groups = {g.name: g for g in job.member_groups(rank)}
    pg_ids = {name: index for index, name in enumerate(groups)}
    seq = dict.fromkeys(groups, 0)
    p2p = dict.fromkeys(groups, 0)
    status = {name: [0, -1, -1] for name in groups}  # enqueued, started, completed
    frames: dict[tuple[str, int], list[dict[str, Any]]] = {}
    entries = []
    for record, call in enumerate(calls):
        group = groups[call.group]
        if call.is_p2p:
            p2p[group.name] += 1
            local = {r: i for i, r in enumerate(sorted(group.ranks))}
            me, other = local[rank], local[call.peer if call.peer is not None else rank]
            name = f"send {me}->{other}" if call.op == "send" else f"recv {me}<-{other}"
        else:
            seq[group.name] += 1
            name = call.op
        counter = p2p[group.name] if call.is_p2p else seq[group.name]
        current = status[group.name]
        current[0] = counter
        if call.state in ("started", "completed"):
            current[1] = counter
        if call.state == "completed":
            current[2] = counter
        created = 1_700_000_000_000_000_000 + record * 1_000_000
        entries.append(
            {
                "frames": _frames(call, frames),
                "record_id": record,
                "pg_id": pg_ids[group.name],
                "process_group": (group.name, group.desc),
                "thread_name": "pt_main_thread",
                "thread_id": "139872016394048",
                "collective_seq_id": seq[group.name],
                "p2p_seq_id": p2p[group.name],
                "op_id": record + 1,
                "profiling_name": f"{job.backend}:{name}",
                "time_created_ns": created,
                "duration_ms": 0.25 if call.state == "completed" else None,
                "input_sizes": [list(s) for s in call.sizes],
                "input_dtypes": [call.dtype] * len(call.sizes),
                "output_sizes": [list(s) for s in (call.out_sizes or call.sizes)],
                "output_dtypes": [call.dtype] * len(call.out_sizes or call.sizes),
                "state": call.state,
                "time_discovered_started_ns": created + 1000
                if call.state in ("started", "completed")
                else None,
                "time_discovered_completed_ns": created + 5000
                if call.state == "completed"
                else None,
                "retired": call.state == "completed",
                "timeout_ms": 600_000,
                "is_p2p": call.is_p2p,
            }
        )
    for entry in entries:
        if entry["duration_ms"] is None:
            del entry["duration_ms"]
    lib_key = "comm_lib_version" if _minor(job.version) >= 10 else "nccl_version"
    return {
        "version": job.version,
        "pg_config": {
            g.name: {"name": g.name, "desc": g.desc, "ranks": str(list(g.ranks))}
            for g in groups.values()
        },
        lib_key: "2.21.5",
        "pg_status": {
            str(pg_ids[name]): {
                "last_enqueued_collective": s[0],
                "last_started_collective": s[1],
                "last_completed_collective": s[2],
            }
            for name, s in status.items()
        },
        "entries": entries,
    }


def _minor(version: str) -> int:
    try:
        return int(version.split(".")[1])
    except (IndexError, ValueError):
        return 0


# --- encodings ---------------------------------------------------------------------------


class _TorchPickler:
    """Protocol 2 with torch's memo policy: strings and shared dicts (frames) memoized."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.memo: dict[object, int] = {}
        self.shared: set[int] = set()

    def _put(self, key: object) -> None:
        index = len(self.memo)
        self.memo[key] = index
        self.out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)

    def _get(self, index: int) -> None:
        self.out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)

    def value(self, obj: Any) -> None:
        out = self.out
        if obj is None:
            out += b"N"
        elif obj is True:
            out += b"\x88"
        elif obj is False:
            out += b"\x89"
        elif isinstance(obj, int):
            if 0 <= obj < 256:
                out += b"K" + bytes([obj])
            elif 0 <= obj < 65536:
                out += b"M" + struct.pack("<H", obj)
            elif -(2**31) <= obj < 2**31:
                out += b"J" + struct.pack("<i", obj)
            else:
                raw = obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True)
                out += b"\x8a" + bytes([len(raw)]) + raw
        elif isinstance(obj, float):
            out += b"G" + struct.pack(">d", obj)
        elif isinstance(obj, str):
            key: tuple[str, object] = ("s", obj)
            if key in self.memo:
                self._get(self.memo[key])
            else:
                raw = obj.encode("utf-8")
                out += b"X" + struct.pack("<I", len(raw)) + raw
                self._put(key)
        elif isinstance(obj, tuple) and len(obj) == 2:
            self.value(obj[0])
            self.value(obj[1])
            out += b"\x86"
        elif isinstance(obj, list):
            out += b"]("
            for item in obj:
                self.value(item)
            out += b"e"
        elif isinstance(obj, dict):
            key = ("d", id(obj))
            if key in self.memo:
                self._get(self.memo[key])
                return
            out += b"}("
            for k, v in obj.items():
                self.value(k)
                self.value(v)
            out += b"u"
            if id(obj) in self.shared:
                self._put(key)
        else:
            raise TypeError(f"cannot encode {type(obj).__name__}")


def encode_pickle(dump: Mapping[str, Any]) -> bytes:
    """The bytes `_dump_fr_trace` / the NCCL dump-on-timeout file would hold."""
    pickler = _TorchPickler()
    for entry in dump.get("entries", []):
        for frame in entry.get("frames", []):
            pickler.shared.add(id(frame))
    pickler.value(dict(dump))
    pickler.out += b"."
    return bytes(pickler.out)


def encode_json(dump: Mapping[str, Any]) -> bytes:
    """The text `_dump_fr_trace_json` returns: no frames, strings in pg_status, 0 for unset."""

    def entry(e: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in e.items() if k != "frames"}
        out["process_group"] = list(e["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            out[key] = out[key] or 0
        return out

    doc: dict[str, Any] = {
        k: v for k, v in dump.items() if k not in ("entries", "pg_status", "nccl_version")
    }
    doc.setdefault("comm_lib_version", dump.get("nccl_version", ""))
    doc["pg_status"] = {
        pg: {k: str(v) for k, v in status.items()} for pg, status in dump["pg_status"].items()
    }
    if dump.get("entries"):
        doc["entries"] = [entry(e) for e in dump["entries"]]
    doc["nccl_comm_state"] = {}
    return json.dumps(doc, sort_keys=True).encode()


def write_dumps(
    folder: Path,
    job: Job,
    calls_of: Callable[[int], Sequence[Call]],
    *,
    prefix: str = DEFAULT_PREFIX,
    fmt: str = "pickle",
    skip: Iterable[int] = (),
) -> list[Path]:
    """One file per rank, `prefix` + rank (``.json`` appended for JSON); ranks in `skip`
    write nothing, like a rank that died before its dump."""
    folder.mkdir(parents=True, exist_ok=True)
    encode = encode_pickle if fmt == "pickle" else encode_json
    cache: dict[tuple[int, tuple[str, ...]], bytes] = {}
    skipped = set(skip)
    paths = []
    for rank in range(job.world_size):
        if rank in skipped:
            continue
        calls = calls_of(rank)
        groups = tuple(g.name for g in job.member_groups(rank))
        key = (id(calls), groups)
        if key not in cache or any(c.is_p2p for c in calls):
            cache[key] = encode(rank_dump(job, rank, calls))
        path = folder / f"{prefix}{rank}{'.json' if fmt == 'json' else ''}"
        path.write_bytes(cache[key])
        paths.append(path)
    return paths


# --- planted faults ----------------------------------------------------------------------


@dataclass(frozen=True)
class Planted:
    """What a correct diagnosis of a generated job says."""

    cause_id: str
    culprits: tuple[int, ...]
    line: int | None
    seq: int


HEALTHY_LINE = 40
FAULT_LINE = 77


def history(entries: int, *, final_state: str = "started") -> list[Call]:
    """A training loop's gradient all_reduces; the last one is in flight."""
    calls = [Call("all_reduce", line=HEALTHY_LINE) for _ in range(entries - 1)]
    return [*calls, Call("all_reduce", line=HEALTHY_LINE, state=final_state)]


def plant(
    kind: str, world_size: int, entries: int, culprit: int
) -> tuple[Job, Callable[[int], Sequence[Call]], Planted]:
    """A job of `world_size` ranks, `entries` recorded ops each, with one fault at the end.

    kinds: ``rank_not_in_collective`` (the culprit never enqueued the last collective),
    ``mismatched_collective`` (it enqueued a broadcast instead), ``shape_mismatch`` (same
    all_reduce, other size), ``scheduled`` (its GPU never started the last collective),
    ``p2p_deadlock`` (the culprit and its neighbour both send first), ``rank_exited``
    (its dump is missing: pass ``Planted.culprits`` as ``skip`` to `write_dumps`).
    """
    job = Job(world_size)
    normal = history(entries)
    odd: list[Call]
    cause = f"hang.{kind}"
    culprits: tuple[int, ...] = (culprit,)
    line: int | None = FAULT_LINE
    if kind == "rank_not_in_collective":
        odd = [*normal[:-1]]
        odd[-1] = replace(odd[-1], line=FAULT_LINE)
    elif kind == "mismatched_collective":
        odd = [*normal[:-1], Call("broadcast", line=FAULT_LINE, state="started")]
    elif kind == "shape_mismatch":
        odd = [
            *normal[:-1],
            Call("all_reduce", sizes=((1024, 1000),), line=FAULT_LINE, state="started"),
        ]
    elif kind == "scheduled":
        odd = [*normal[:-1], Call("all_reduce", line=HEALTHY_LINE, state="scheduled")]
        cause, line = "hang.rank_not_in_collective", HEALTHY_LINE
    elif kind == "rank_exited":
        odd, line = normal, None
    elif kind == "p2p_deadlock":
        peer = (culprit + 1) % world_size
        both = {culprit: peer, peer: culprit}
        base = normal[:-1]

        def p2p_calls(rank: int) -> Sequence[Call]:
            if rank in both:
                return [*base, Call("send", peer=both[rank], state="started", line=FAULT_LINE)]
            return base

        culprits = tuple(sorted(both))
        return job, p2p_calls, Planted(cause, culprits, FAULT_LINE, entries)
    else:
        raise ValueError(f"unknown fault {kind!r}")
    return (
        job,
        lambda rank: odd if rank == culprit else normal,
        Planted(cause, culprits, line, entries),
    )
