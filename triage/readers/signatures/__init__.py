"""Failure signatures: the log lines that name what went wrong, as a table.

A signature is a stable name, a regex with named groups for the numbers that
matter, and the literal anchors a fast one-pass prefilter looks for. Log tools
scan gigabytes for the anchors only and run the full regexes on the few lines
that carry one; rules read the matches by signature name, never by raw text.

Each module of this package holds one family (NCCL, c10d, CUDA memory, launchers,
...) and registers its signatures with `signature(...)` at import.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import re2  # type: ignore[import-untyped]

Extract = Callable[[re.Match[str]], dict[str, Any]]


@dataclass(frozen=True)
class Signature:
    """One recognisable failure line; `peer_symptom` marks lines that report another rank's failure."""

    name: str
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]
    summary: str
    peer_symptom: bool = False
    context_after: int = 0
    extract: Extract | None = None
    cases: tuple[str, ...] = field(default=())

    def match(self, line: str) -> dict[str, Any] | None:
        """The fields of this signature in `line`, or None when it does not match."""
        found = self.pattern.search(line)
        if found is None:
            return None
        fields = {k: v for k, v in found.groupdict().items() if v is not None}
        if self.extract is not None:
            fields |= self.extract(found)
        return fields


SIGNATURES: dict[str, Signature] = {}

# Anchors that open a multi-line block (tracebacks, stack dumps, launcher reports):
# the scanner keeps the lines after them for the block parsers.
BLOCK_ANCHORS: dict[str, int] = {}


def signature(
    name: str,
    pattern: str,
    *,
    anchors: tuple[str, ...] | str,
    summary: str,
    peer_symptom: bool = False,
    context_after: int = 0,
    extract: Extract | None = None,
    flags: int = 0,
) -> Signature:
    """Register a signature; each anchor must be a literal that occurs in every match."""
    anchors = (anchors,) if isinstance(anchors, str) else anchors
    compiled = re.compile(pattern, flags)
    if name in SIGNATURES and SIGNATURES[name].pattern.pattern != compiled.pattern:
        raise ValueError(f"signature {name} is registered twice")
    sig = Signature(name, compiled, anchors, summary, peer_symptom, context_after, extract)
    SIGNATURES[name] = sig
    return sig


def block_anchor(anchor: str, lines_after: int) -> None:
    """Keep `lines_after` lines after every line holding `anchor` for the block parsers."""
    BLOCK_ANCHORS[anchor] = max(lines_after, BLOCK_ANCHORS.get(anchor, 0))


_loaded = False


def load() -> dict[str, Signature]:
    """Import every family module once; the table is complete after this."""
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True
    return SIGNATURES


def anchors() -> dict[str, int]:
    """Every anchor with the lines of context to keep after it."""
    out: dict[str, int] = dict(BLOCK_ANCHORS)
    for sig in load().values():
        for anchor in sig.anchors:
            out[anchor] = max(out.get(anchor, 0), sig.context_after)
    return out


_index: tuple[int, Any, list[tuple[str, list[Signature]]]] | None = None


def _lookup() -> tuple[Any, list[tuple[str, list[Signature]]]]:
    """Anchors -> signatures, and one RE2 pattern that says whether a line has any anchor."""
    global _index
    table = load()
    if _index is None or _index[0] != len(table):
        by_anchor: dict[str, list[Signature]] = {}
        for sig in table.values():
            for anchor in sig.anchors:
                by_anchor.setdefault(anchor, []).append(sig)
        pattern = re2.compile(
            "|".join(re.escape(a) for a in sorted(by_anchor, key=len, reverse=True))
        )
        _index = (len(table), pattern, list(by_anchor.items()))
    return _index[1], _index[2]


def matches(line: str) -> Iterator[tuple[Signature, dict[str, Any]]]:
    """Every signature matching a line: anchors first, the full regex only then."""
    pattern, by_anchor = _lookup()
    if not pattern.search(line):
        return
    tried: set[str] = set()
    for anchor, sigs in by_anchor:
        if anchor not in line:
            continue
        for sig in sigs:
            if sig.name in tried:
                continue
            tried.add(sig.name)
            fields = sig.match(line)
            if fields is not None:
                yield sig, fields


_UNITS = {
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
}


def parse_size(text: str | None) -> int | None:
    """'3.14 GiB' -> bytes; None when it is not a size."""
    if not text:
        return None
    found = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?i?B|[KMG]|bytes?)?\s*", text, re.IGNORECASE)
    if not found:
        return None
    unit = (found.group(2) or "b").lower().rstrip("s")
    unit = "b" if unit in ("byte", "b") else unit
    try:
        return int(float(found.group(1)) * _UNITS[unit])
    except (KeyError, ValueError):
        return None
