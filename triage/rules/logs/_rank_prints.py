"""The ranks' own prints, side by side: what each rank printed under one name at one point.

`rank 0: amp=False` and `rank 1: amp=True` are two values of `amp` at no particular point;
`Rank 0. Batch idx: 6, cuts: [...]` and `Rank 1. Batch idx: 6, cuts: [...]` two values of
`cuts` at batch 6. The rules compare them: state that every replica must share (a setting,
a parameter checksum) must be equal, data each rank draws for itself (batches, samples,
random draws) must differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from triage.registry import EvidenceSet
from triage.rules.logs._signals import Signal, signals

#: `key: value` / `key=value`, the value a bracketed list, a quoted string or one token.
_PAIR = re.compile(
    r"(?P<key>#?[A-Za-z_][\w.-]*(?:\(\))?)\s*[:=]\s*"
    r"(?P<value>\[[^\]]*\]?|\([^)]*\)?|'[^']*'|\"[^\"]*\"|[^\s,;|]+)"
)
#: Where in the run a print was made (`step 3`, `Batch idx: 6`, `epoch=2`), not what it holds.
_POSITION = re.compile(
    r"(?i)\b(?P<key>batch[ _]idx|idx|batch|step|iter(?:ation)?|epoch|micro-?batch)"
    r"\s*[:=#]?\s*(?P<n>\d+)\b"
)
#: Names that differ per rank in any job: where the rank runs, and its timing and memory.
WHERE_AND_WHEN = (
    r"rank|device|cuda|gpu|dev\b|host|node|\bip\b|addr|port|pid|tid|thread|worker|time|"
    r"elapsed|sec|mem"
)
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass
class Printed:
    """The values of one name at one point of the run, per rank, with the lines that hold them."""

    key: str
    position: str
    values: dict[int, str] = field(default_factory=dict)
    lines: dict[int, Signal] = field(default_factory=dict)

    def ranks(self) -> list[int]:
        return sorted(self.values)


def printed(evidence: EvidenceSet, *, tensor_parallel: bool = False) -> list[Printed]:
    """Every name printed by two or more ranks at the same point; each rank's first value.
    `tensor_parallel`: the prints of tensor-parallel ranks (`TP3: ...`), by their TP rank."""
    table: dict[tuple[str, str], Printed] = {}
    name, field = (
        ("printed.tp_rank_value", "tp_rank") if tensor_parallel else ("printed.rank_value", "rank")
    )
    for item in signals(evidence, name):
        sig = item[1]
        rank, body = int(sig.fields[field]), str(sig.fields["body"])
        at = _POSITION.search(body)
        position = f"{at['key']} {at['n']}" if at else ""
        pairs = [(m["key"], m["value"]) for m in _PAIR.finditer(body)]
        named = [(k, v) for k, v in pairs if not _POSITION.fullmatch(f"{k}: {v}")]
        named = named or [("", body)]
        for key, value in named:
            entry = table.setdefault((key, position), Printed(key, position))
            if rank not in entry.values:
                entry.values[rank] = value
                entry.lines[rank] = item
    return [entry for entry in table.values() if len(entry.values) > 1]


def is_number(value: str) -> bool:
    return _NUMBER.fullmatch(value.strip("'\"")) is not None


def without_rank(value: str, rank: int) -> str:
    """The value with the rank's own number masked: `cuda:1` on rank 1 is `cuda:#` like
    `cuda:0` on rank 0, the same setting."""
    return re.sub(rf"(?<!\d){rank}(?!\d)", "#", value)


def list_items(value: str) -> int:
    """How many items a bracketed list holds (0 when the value is not one)."""
    if not value.startswith(("[", "(")):
        return 0
    inner = value.strip("[]() ")
    return len([part for part in inner.split(",") if part.strip()]) if inner else 0
