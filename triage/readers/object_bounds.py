"""How many containers a document may build, judged from its bytes before it is parsed.

A size cap bounds bytes, not memory: 20 MB of pickle `}` opcodes unpickle into 20 million
dicts (1.8 GB), and 19 MB of `[{},{},...]` became 6 million records to validate. Every
container a pickle or a JSON text builds starts with a byte of its own (an opcode, a
bracket), so counting those bytes anywhere in the document, at the speed of
`bytes.count`, bounds its containers from above (bytes inside strings count too, which
only errs towards refusing). Real documents hold far fewer: a Flight Recorder pickle one
container byte per 10 bytes, a memory snapshot one per 18 to 36, JSON one per 40 or more.
More than one per `BYTES_PER_CONTAINER` bytes (beyond `FLOOR`), or more than
`MAX_CONTAINERS` in all, is refused before anything is built.
"""

from __future__ import annotations

FLOOR = 1 << 20  # containers any document may hold, whatever its size
BYTES_PER_CONTAINER = 4
MAX_CONTAINERS = 16 << 20  # about 1 GB of small dicts and lists
#: EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, MARK (before TUPLE, LIST, DICT, FROZENSET),
#: TUPLE1-3 and EMPTY_SET: every opcode that makes a container.
PICKLE_CONTAINER_OPCODES = b"}])(\x85\x86\x87\x8f"
JSON_OPENERS = "{["


class TooManyObjects(ValueError):
    """A document that would build more containers than its size allows."""


def allowed_containers(size: int) -> int:
    """The most containers a document of `size` bytes may build."""
    return min(MAX_CONTAINERS, max(FLOOR, size // BYTES_PER_CONTAINER))


def check_pickle(data: bytes) -> None:
    """Raise TooManyObjects when a pickle's container opcodes could exceed its allowance."""
    _check(sum(data.count(bytes([op])) for op in PICKLE_CONTAINER_OPCODES), len(data))


def check_json(text: str | bytes) -> None:
    """Raise TooManyObjects when a JSON text's brackets could exceed its allowance."""
    if isinstance(text, bytes):
        count = text.count(b"{") + text.count(b"[")
    else:
        count = text.count("{") + text.count("[")
    _check(count, len(text))


def _check(count: int, size: int) -> None:
    allowed = allowed_containers(size)
    if count > allowed:
        raise TooManyObjects(
            f"up to {count:,} containers in {size:,} bytes, more than the {allowed:,} a "
            "document of that size may build (a crafted or corrupt file): not loaded"
        )
