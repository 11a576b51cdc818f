"""A dump file's bytes, read lazily: the head and the tail that torch's pickles keep their
header and frontier in, and the whole file only when a read leaves them."""

from __future__ import annotations

from triage.readers.flight_recorder.dump_records import UnreadableDump

MAX_DUMP_BYTES = 256 << 20
HEAD_BYTES = 64 << 10  # read first: the header and the first entries of most dumps
TAIL_BYTES = 64 << 10  # read from the end: the frontier of most dumps
MAX_TAIL_BYTES = 4 << 20  # a tail read further back than this reads the whole file


class _Bytes:
    """A dump's bytes, read lazily. The fast path needs the head of the file (header and
    first entries) and its tail (the frontier); a search or slice that leaves them reads
    the whole file once. Matches are what `bytes` would return on the whole file: a
    forward search that finds nothing in the head, or a backward one that finds nothing
    in the tail, goes on over everything."""

    def __init__(self, path: str | None, head: bytes, size: int) -> None:
        self.path = path
        self.head = head
        self.size = size
        self.tail = b""
        self.tail_at = size
        self.complete = len(head) >= size

    def __len__(self) -> int:
        return self.size

    def whole(self) -> bytes:
        if not self.complete:
            assert self.path is not None  # a view without a file is complete
            with open(self.path, "rb") as handle:
                data = handle.read(MAX_DUMP_BYTES + 1)
            if len(data) > MAX_DUMP_BYTES:
                raise UnreadableDump(f"over the {MAX_DUMP_BYTES}-byte limit for dumps: grew")
            self.head, self.size, self.tail, self.tail_at = data, len(data), b"", len(data)
            self.complete = True
        return self.head

    def _tail_from(self, start: int) -> bool:
        """Make the tail hold [start, size) if it is a tail's worth; False when it is not."""
        if start >= self.tail_at:
            return True
        begin = min(start, self.size - TAIL_BYTES)
        if begin <= len(self.head) or self.size - begin > MAX_TAIL_BYTES:
            return False
        assert self.path is not None
        with open(self.path, "rb") as handle:
            handle.seek(begin)
            tail = handle.read(self.size - begin)
        if len(tail) != self.size - begin:  # the file changed under us: read it whole
            return False
        self.tail, self.tail_at = tail, begin
        return True

    def _holding(self, start: int, end: int) -> tuple[bytes, int]:
        """A buffer and its file offset that hold [start, end) of a view not yet complete."""
        if end <= len(self.head):
            return self.head, 0
        if self._tail_from(start):
            return self.tail, self.tail_at
        return self.whole(), 0

    def __getitem__(self, key: slice) -> bytes:
        if self.complete:  # most dumps fit in the head: no bookkeeping per slice
            return self.head[key]
        start, end, _ = key.indices(self.size)
        if end <= start:
            return b""
        buffer, offset = self._holding(start, end)
        return buffer[start - offset : end - offset]

    def byte(self, at: int) -> int:
        return self[at : at + 1][0] if at < self.size else -1

    def startswith(self, prefix: bytes) -> bool:
        return self[: len(prefix)] == prefix

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        if self.complete:
            return self.head.find(sub, start, end)
        end = self.size if end is None else min(end, self.size)
        if end - start < len(sub):
            return -1
        if start < len(self.head):
            found = self.head.find(sub, start, min(end, len(self.head)))
            if found >= 0 or end <= len(self.head):
                return found
        buffer, offset = self._holding(start, end)
        found = buffer.find(sub, max(0, start - offset), end - offset)
        return found + offset if found >= 0 else -1

    def rfind(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        if self.complete:
            return self.head.rfind(sub, start, end)
        end = self.size if end is None else min(end, self.size)
        if end - start < len(sub):
            return -1
        if end > len(self.head) and self._tail_from(self.size - TAIL_BYTES) and end > self.tail_at:
            found = self.tail.rfind(sub, max(0, start - self.tail_at), end - self.tail_at)
            if found >= 0 or start >= self.tail_at:
                return found + self.tail_at if found >= 0 else -1
        buffer, offset = self._holding(start, end)
        found = buffer.rfind(sub, max(0, start - offset), end - offset)
        return found + offset if found >= 0 else -1

    def count(self, sub: bytes, start: int, end: int) -> int:
        if self.complete:
            return self.head.count(sub, start, end)
        end = min(end, self.size)
        if end - start < len(sub):
            return 0
        buffer, offset = self._holding(start, end)
        return buffer.count(sub, start - offset, end - offset)
