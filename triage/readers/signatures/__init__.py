"""Failure signatures: the log lines that name what went wrong, as a table.

A signature is a stable name, a regex with named groups for the numbers that
matter, and the literal anchors a fast one-pass prefilter looks for. Log tools
scan gigabytes for the anchors only and run the full regexes on the few lines
that carry one; rules read the matches by signature name, never by raw text.

Each signature also says how its lines are kept (`Retention`): a decisive line (a WARN,
an error, a timeout, an exit) is rare and every rank keeps it; a frequent one (NCCL's
per-op COLL lines) names a `Series` and the scanner aggregates it without reading each
line in Python, so a log made of millions of them still keeps its few decisive lines.
A line that holds an anchor but matches no signature is noise: counted, not kept.

Each module of this package holds one family (NCCL, c10d, CUDA memory, launchers,
...) and registers its signatures with `signature(...)` at import.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

import re2  # type: ignore[import-untyped]

Extract = Callable[[re.Match[str]], dict[str, Any]]


class Retention(StrEnum):
    """How the scanner keeps a signature's lines: what is rare is kept, what repeats is counted."""

    #: Rare and decisive (WARN, errors, timeouts, exits): kept per rank, with context.
    DECISIVE = "decisive"
    #: Frequent and informative (per-op progress): counted per series, first, last and
    #: latest lines kept.
    FREQUENT = "frequent"


@dataclass(frozen=True)
class Series:
    """How the fast pass takes a frequent signature's lines by the run, without Python per line.

    `line` is an RE2 fragment every such line holds (the prefilter takes runs of lines that
    hold it); `key` names the field that tells series apart (NCCL's communicator) and
    `token` is the literal, with `{}` for the key's value, that holds it once in each line:
    counting the token counts a series' lines. `progress` names a field that grows by one
    from each line of a series to the next (NCCL's opCount, per communicator): where it
    does, a series' lines in a run are its last value less its first, plus one.
    Without a `key` each writer's lines are one series and `token` is a plain literal (a
    training loop's `memory:`). `anchor_is_line` says a line holding the signature's first
    anchor is always one of its lines (NCCL's `: opCount `); where it is not (`memory:` is
    in other lines too), the fast pass checks a window of lines against `line` before it
    takes the window as a run.
    """

    line: str
    key: str | None
    token: str
    progress: str | None = None
    anchor_is_line: bool = True

    def value_of(self, fields: dict[str, Any]) -> str | None:
        """A line's key value ("" for a series without a key); None when it has none."""
        if self.key is None:
            return ""
        return str(fields[self.key]) if self.key in fields else None

    def token_of(self, value: str) -> bytes:
        return self.token.format(value).encode()


@dataclass(frozen=True)
class Signature:
    """One recognisable failure line; `peer_symptom` marks lines that report another rank's failure."""

    name: str
    regex: str
    anchors: tuple[str, ...]
    summary: str
    peer_symptom: bool = False
    context_after: int = 0
    extract: Extract | None = None
    cases: tuple[str, ...] = field(default=())
    series: Series | None = None
    flags: int = 0

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """Compiled on first use: a scan compiles the few signatures whose anchors it meets,
        and a start-up does not pay for every regex of the table."""
        return re.compile(self.regex, self.flags)

    @property
    def retention(self) -> Retention:
        return Retention.DECISIVE if self.series is None else Retention.FREQUENT

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
    series: Series | None = None,
) -> Signature:
    """Register a signature; each anchor must be a literal that occurs in every match."""
    anchors = (anchors,) if isinstance(anchors, str) else anchors
    if name in SIGNATURES and SIGNATURES[name].regex != pattern:
        raise ValueError(f"signature {name} is registered twice")
    sig = Signature(
        name,
        pattern,
        anchors,
        summary,
        peer_symptom,
        context_after,
        extract,
        series=series,
        flags=flags,
    )
    SIGNATURES[name] = sig
    return sig


def first_of(**fields: tuple[str, ...]) -> Extract:
    """An extract that gives one field the first of several groups that matched: a regex
    may not reuse a group's name across its alternatives (`host`, `host2`, `host3` for one
    host). The groups themselves stay in the fields as the match found them."""

    def extract(found: re.Match[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, groups in fields.items():
            value = next((found[g] for g in groups if found[g] is not None), None)
            if value is not None:
                out[name] = value
        return out

    return extract


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


def frequent() -> list[Signature]:
    """The signatures whose lines the fast pass aggregates by the run."""
    return [sig for sig in load().values() if sig.retention is Retention.FREQUENT]


def anchors() -> dict[str, int]:
    """Every anchor with the lines of context to keep after it."""
    table = load()  # the block anchors too: `blocks` is one of the modules it imports
    out: dict[str, int] = dict(BLOCK_ANCHORS)
    for sig in table.values():
        for anchor in sig.anchors:
            out[anchor] = max(out.get(anchor, 0), sig.context_after)
    return out


_index: tuple[int, Any, list[list[Signature]]] | None = None


def _lookup() -> tuple[Any, list[list[Signature]]]:
    """An RE2 set of every anchor (one pass over a line names all the anchors it holds) and
    the signatures of each anchor, in the set's order."""
    global _index
    table = load()
    if _index is None or _index[0] != len(table):
        by_anchor: dict[str, list[Signature]] = {}
        for sig in table.values():
            for anchor in sig.anchors:
                by_anchor.setdefault(anchor, []).append(sig)
        found = re2.Set.SearchSet()
        for anchor in by_anchor:
            found.Add(re.escape(anchor))
        found.Compile()
        _index = (len(table), found, list(by_anchor.values()))
    return _index[1], _index[2]


def matches(line: str) -> Iterator[tuple[Signature, dict[str, Any]]]:
    """Every signature matching a line: anchors first, the full regex only then."""
    found, by_anchor = _lookup()
    tried: set[str] = set()
    for index in sorted(found.Match(line) or ()):
        for sig in by_anchor[index]:
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
