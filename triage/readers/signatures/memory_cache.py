"""The caching allocator's two numbers on one line: memory allocated to tensors and memory
reserved by the cache, as training loops print torch.cuda.memory_allocated() and
memory_reserved() (`Allocated: 60.9 GB  Reserved: 127 GB`). Reserved far above allocated
is memory the cache holds and does not reuse (`triage.rules.logs.reserved_unallocated`).
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature
from triage.readers.signatures.memory import binary_size


def _allocated_reserved(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("allocated", "reserved"):
        for spelled in (key, f"{key}2"):
            if found[spelled] is not None:
                size = binary_size(found[spelled], found[f"{spelled}_unit"])
                if size is not None:
                    out[key] = size
    return out


# Either order; `memory_allocated` and `Allocated` alike, never `unallocated`.
_NAMED_SIZE = r"[^\d\n]{{0,40}}?(?P<{0}>\d+(?:\.\d+)?) ?(?P<{0}_unit>[KMGT]i?B)\b"
signature(
    "memory.allocated_reserved",
    r"(?<![A-Za-z])[Aa]llocated"
    + _NAMED_SIZE.format("allocated")
    + r".*?(?<![A-Za-z])[Rr]eserved"
    + _NAMED_SIZE.format("reserved")
    + r"|(?<![A-Za-z])[Rr]eserved"
    + _NAMED_SIZE.format("reserved2")
    + r".*?(?<![A-Za-z])[Aa]llocated"
    + _NAMED_SIZE.format("allocated2"),
    anchors=("eserved",),
    summary="a line with the GPU memory allocated to tensors and reserved by the caching "
    "allocator: reserved far above allocated is memory the cache cannot reuse",
    extract=_allocated_reserved,
)
