"""The fast path for torch's own pickles (protocol 2, memoized strings and frames).

The file is read at its head and its tail, the header and first entries are unpickled as
a prefix, and only the entries near the rank's frontier (how far back pg_status says) are
unpickled, with the prefix's memo for their references. Anything else returns None and
goes through the general path, which reads and unpickles the whole file. The fast path
never runs what it does not read: a dump tampered with in its middle is read like any
other, and nothing in it executes (the restricted unpickler only). Stacks recorded
between the prefix and the frontier stay unresolved; the few ranks a report names are
re-read whole for their user-code line (job_analysis.locate).
"""

from __future__ import annotations

import io
import pickle
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from triage.readers.flight_recorder.dump_bytes import _Bytes
from triage.readers.flight_recorder.dump_entries import _int, _status
from triage.readers.flight_recorder.dump_records import UnreadableDump
from triage.readers.safe_pickle import RestrictedUnpickler, UntrustedPickleError

MARGIN = 4  # entries decoded before a rank's first unfinished one (fast path)
PREFIX_ENTRIES = 4  # entries unpickled with the header: they define most memoized strings
CHUNK = 8  # entries decoded from the end at first; doubled until the frontier is in
MAX_BACK = 1024  # entries decoded from the end at most; beyond, the general path reads it
_MISSING_MEMO = re.compile(r"Memo value not found at index (\d+)")


def _unpickler(data: bytes) -> RestrictedUnpickler:
    """The restricted unpickler over a buffered stream: with `peek` it reads in blocks,
    with a bare BytesIO it makes a Python call per opcode (twice as slow)."""
    return RestrictedUnpickler(io.BufferedReader(io.BytesIO(data), max(8192, len(data))))


def _ref(index: int) -> bytes:
    return b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)


def _int_op(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    return b"J" + struct.pack("<i", value)


class _Layout:
    """Where a torch-written dump keeps its entries, and the memo their references need.

    Torch's pickler memoizes every string and every frame dict and nothing else, and
    writes each entry as `}(` + key/value pairs + `u`, the first key the same in all.
    After the first entry the key is a memo reference, so `}(` + that reference marks
    where every later entry starts. The header and the first entries are unpickled as a
    prefix; its memo, padded with None for indices defined further on, lets any run of
    later entries be unpickled on its own.
    """

    def __init__(self, data: _Bytes, list_start: int, marker: bytes, prefix_end: int) -> None:
        self.data = data
        self.list_start = list_start
        self.marker = marker
        self.prefix_end = prefix_end
        self.memo: Any = None
        self.memo_size = 0
        self.prefix_memo: Any = None
        self.known = 0
        self.strings: Mapping[int, str] = {}

    def pad(self, size: int, strings: Mapping[int, str] | None = None) -> None:
        """Memo = the prefix's, plus `strings` or None at each index up to `size`."""
        strings = strings or {}
        if strings:
            filler = bytearray()
            for index in range(self.known, size):
                text = strings.get(index)
                if text is None:
                    filler += _filler(index)
                else:
                    raw = text.encode("utf-8")
                    filler += b"X" + struct.pack("<I", len(raw)) + raw + b"r"
                    filler += struct.pack("<I", index) + b"0"
            stream = b"\x80\x02" + bytes(filler) + b"N."
        else:
            stream = _fillers(self.known, size)
        source = _unpickler(stream)
        source.memo = self.prefix_memo
        source.load()
        self.memo, self.memo_size, self.strings = source.memo, max(size, self.known), strings

    def starts_before(self, end: int, count: int) -> list[int]:
        """Start offsets of up to `count` entries before offset `end` (after the prefix)."""
        found: list[int] = []
        while len(found) < count:
            at = self.data.rfind(self.marker, self.prefix_end, end)
            if at < 0:
                break
            found.append(at)
            end = at
        return found[::-1]

    def decode(self, begin: int, end: int | None) -> list[Any]:
        """The entries from offset `begin` to `end` (None: to the end of the list)."""
        data = self.data
        if end is None:
            chunk = b"\x80\x02}(X\x01\x00\x00\x00_](" + data[begin:]
        else:
            chunk = b"\x80\x02](" + data[begin:end] + b"e."
        items: Any = None
        while items is None:
            unpickler = _unpickler(chunk)
            unpickler.memo = self.memo
            try:
                items = unpickler.load()
            except pickle.UnpicklingError as exc:
                missing = _MISSING_MEMO.search(str(exc))
                if missing is None or not self.memo_size <= int(missing[1]) < 4_000_000:
                    raise
                self.pad(int(missing[1]) + 512, self.strings)
        if isinstance(items, dict):
            items = items.get("_")
        expected = data.count(self.marker, begin, len(data) if end is None else end)
        if not isinstance(items, list) or len(items) != expected:
            raise ValueError("entry boundaries are not where the markers say")
        return items


def _filler(index: int) -> bytes:
    return b"Nr" + struct.pack("<I", index) + b"0"


_FILLERS: dict[tuple[int, int], bytes] = {}


def _fillers(start: int, end: int) -> bytes:
    """A pickle that puts None at memo indices start..end-1; dumps of one job share them."""
    key = (start, end)
    stream = _FILLERS.get(key)
    if stream is None:
        if len(_FILLERS) > 1024:
            _FILLERS.clear()
        body = b"".join(_filler(i) for i in range(start, end))
        stream = _FILLERS[key] = b"\x80\x02" + body + b"N."
    return stream


def _fast_pickle(data: _Bytes) -> tuple[dict[str, Any], list[Any], int] | None:
    """Header, the entries that show the rank's frontier (oldest first) and the entry
    count of a dump torch's C++ pickler wrote; None for any other layout."""
    if not data.startswith(b"\x80\x02}("):
        return None
    key = b"X\x07\x00\x00\x00entries"
    at = data.find(key)
    if at < 0:
        return None
    pos = at + len(key)
    if data[pos : pos + 1] == b"q":
        pos += 2
    elif data[pos : pos + 1] == b"r":
        pos += 5
    else:
        return None
    list_start = pos + 2
    first = re.match(rb"\}\(X(....)", data[list_start : list_start + 7], re.DOTALL)
    if data[pos : pos + 2] != b"](" or first is None:
        return None
    length = struct.unpack("<I", first[1])[0]
    put = list_start + 7 + length
    if data[put : put + 1] == b"q":
        marker = b"}(" + _ref(data.byte(put + 1))
    elif data[put : put + 1] == b"r":
        marker = b"}(" + _ref(struct.unpack("<I", data[put + 1 : put + 5])[0])
    else:
        return None
    prefix_end = list_start
    for _ in range(PREFIX_ENTRIES):
        nxt = data.find(marker, prefix_end + 2)
        if nxt < 0:
            return None  # a short dump: the general path reads it whole as fast
        prefix_end = nxt
    layout = _Layout(data, list_start, marker, prefix_end)
    try:
        source = _unpickler(data[:prefix_end] + b"eu.")
        header = source.load()
        if not isinstance(header, dict) or not isinstance(header.get("entries"), list):
            return None
        layout.prefix_memo, layout.known = source.memo, len(source.memo.copy())
        layout.pad(layout.known + 64)
        head_entries = list(header.pop("entries"))
        status = _status(header.get("pg_status"))
        tail, latest = _decode_frontier(layout, status, head_entries)
        if not _strings_resolved([*tail, *latest]):
            # a string first recorded between the prefix and the frontier: find them all
            strings = _string_defs(data.whole(), layout.prefix_end)
            if strings is None:
                return None
            layout.pad(max(layout.memo_size, max(strings, default=0) + 1), strings)
            tail, latest = _decode_frontier(layout, status, head_entries)
            if not _strings_resolved([*tail, *latest]):
                return None
    except UntrustedPickleError as exc:
        if exc.refused is not None:
            raise UnreadableDump(exc.reason) from None
        return None
    except Exception:  # the layout was not what it seemed: the general path decides
        return None
    if not tail:
        return None
    if _record(tail[0]) > _record(head_entries[-1]) + 1:
        entries = [head_entries[0], *latest, *tail]
    else:
        entries = [*head_entries, *tail]
    merged = {_record(e): e for e in entries if isinstance(e, dict)}
    records = sorted(merged)
    if not records or records[0] < 0:
        return None
    head = [_record(e) for e in head_entries]
    back = [_record(e) for e in tail]
    if head != list(range(head[0], head[0] + len(head))) or back != list(
        range(back[0], back[0] + len(back))
    ):
        return None
    return header, [merged[r] for r in records], back[-1] - head[0] + 1


def _record(entry: Any) -> int:
    """An entry's record id (-1 when it has none); a plain int needs no parsing."""
    record = entry.get("record_id")
    return record if type(record) is int else _int(record, -1)


def _decode_frontier(
    layout: _Layout, status: Mapping[int, tuple[int, int, int]], head: list[Any]
) -> tuple[list[Any], list[Any]]:
    tail = _frontier(layout, status)
    if tail is None:
        raise ValueError("the frontier lies too far back")
    if tail and _record(tail[0]) > _record(head[-1]) + 1:
        return tail, _latest_per_group(layout, status, head, tail)
    return tail, []


def _strings_resolved(entries: Iterable[Any]) -> bool:
    """Every string an entry needs came out as a string, not a memo placeholder."""
    for entry in entries:
        if type(entry) is not dict:
            return False
        group = entry.get("process_group")
        if not isinstance(group, (tuple, list)) or None in group:
            return False
        if type(entry.get("profiling_name")) is not str or type(entry.get("state")) is not str:
            return False
        if None in (entry.get("input_dtypes") or ()) or None in (entry.get("output_dtypes") or ()):
            return False
    return True


_STRING_DEF = re.compile(rb"X(..)\x00\x00", re.DOTALL)


def _string_defs(data: bytes, start: int) -> dict[int, str] | None:
    """Memo index -> string for every memoized string after `start` (torch memoizes all).

    A string is `X <len> <utf-8> q|r <index>`; candidates inside other strings or integers
    are ruled out by their length, their encoding and the BINPUT that must follow. Two
    strings claiming one index mean the bytes are not what they seem: None.
    """
    out: dict[int, str] = {}
    resume = start
    limit = len(data)
    for match in _STRING_DEF.finditer(data, start):
        begin = match.start()
        if begin < resume:
            continue
        end = begin + 5 + (match[1][0] | match[1][1] << 8)
        if end + 2 > limit:
            continue
        if data[end] == 0x71:  # q
            index = data[end + 1]
        elif data[end] == 0x72 and end + 5 <= limit:  # r
            index = struct.unpack_from("<I", data, end + 1)[0]
        else:
            continue
        try:
            text = data[begin + 5 : end].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if index in out or index > limit:
            return None
        out[index] = text
        resume = end
    return out


def _frontier(layout: _Layout, status: Mapping[int, tuple[int, int, int]]) -> list[Any] | None:
    """The newest entries, back far enough to hold every group's oldest unfinished
    collective (pg_status says which) and a few finished ones before it."""
    need = {
        pg: completed + 1 for pg, (enqueued, _, completed) in status.items() if completed < enqueued
    }
    count = CHUNK
    end: int | None = None
    decoded: list[Any] = []
    while True:
        starts = layout.starts_before(
            len(layout.data) if end is None else end, count - len(decoded)
        )
        if starts:
            decoded = layout.decode(starts[0], end) + decoded
            end = starts[0]
        reached_prefix = not starts or starts[0] <= layout.prefix_end
        if reached_prefix or _covers(decoded, need):
            return decoded
        if count >= MAX_BACK:
            return None
        count *= 2


def _covers(entries: Sequence[Any], need: Mapping[int, int]) -> bool:
    """Every group with unfinished work is decoded back to before its first unfinished
    collective, and MARGIN entries precede the oldest unfinished entry."""
    for entry in entries[:MARGIN]:
        if isinstance(entry, dict) and entry.get("retired") is False:
            return False
    missing = dict(need)  # group -> a sequence number some entry must be below
    for entry in entries:
        if not missing:
            break
        if isinstance(entry, dict) and not entry.get("is_p2p"):
            pg = _int(entry.get("pg_id"), -1)
            below = missing.get(pg)
            if below is not None and _int(entry.get("collective_seq_id"), -1) < below:
                del missing[pg]
    return not missing


def _latest_per_group(
    layout: _Layout,
    status: Mapping[int, tuple[int, int, int]],
    head: Sequence[Any],
    tail: Sequence[Any],
) -> list[Any]:
    """The newest collective of every group the frontier does not show: its last
    sequence number is what the other ranks' alignment asks about."""
    seen = {_int(e.get("pg_id"), -1) for e in tail if isinstance(e, dict)}
    wanted = [
        pg for pg, (enqueued, _, _) in status.items() if pg not in seen and pg >= 0 and enqueued > 0
    ]
    if not wanted:
        return []
    key_entry = next((e for e in head if isinstance(e, dict) and "pg_id" in e), None)
    pg_key = _key_index(layout, "pg_id")
    if key_entry is None or pg_key is None:
        return []
    found = []
    data = layout.data
    for pg_id in wanted:
        pattern = _ref(pg_key) + _int_op(pg_id)
        end = len(data)
        for _ in range(16):
            at = data.rfind(pattern, layout.prefix_end, end)
            if at < 0:
                break
            begin = data.rfind(layout.marker, layout.prefix_end, at + 1)
            stop = data.find(layout.marker, at)
            if begin < 0:
                break
            item = layout.decode(begin, None if stop < 0 else stop)[0]
            if isinstance(item, dict) and _int(item.get("pg_id"), -1) == pg_id:
                found.append(item)
                if not item.get("is_p2p"):
                    break
            end = begin
    return found


def _key_index(layout: _Layout, key: str) -> int | None:
    """The memo index of a key string torch defined in the first entry."""
    raw = key.encode()
    at = layout.data.find(b"X" + struct.pack("<I", len(raw)) + raw, layout.list_start)
    if at < 0 or at > layout.prefix_end:
        return None
    put = at + 5 + len(raw)
    if layout.data[put : put + 1] == b"q":
        return layout.data.byte(put + 1)
    if layout.data[put : put + 1] == b"r":
        return int(struct.unpack("<I", layout.data[put + 1 : put + 5])[0])
    return None
