"""What a log collector or a paste puts around every line of a log, found once per file.

Kubernetes (`kubectl logs --timestamps`), Docker (`docker logs -t`) and cloud log exports
stamp every line with the time; Docker's json-file driver and log shippers write each line
as a JSON record (`{"log":"...\\n","stream":"stderr","time":"..."}`); `srun --label` puts
the task number first; a report quotes its log (`> `) or indents it four spaces as a code
block, or pastes it out of an editor with each line's number; text copied out of a web page's source keeps its HTML escapes (`File
&quot;train.py&quot;`). The signatures and the block parsers read a line as its program
wrote it (a traceback's `  File "..."` frames, an NCCL line that starts with
`host:pid:tid`), so the scanner takes the dress off first. The dress is read from the head
of the file, and only what (nearly) every line there wears counts: a timestamp that one
framework prints on its own lines stays where it is.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How much of a file's head shows its dress.
HEAD_BYTES = 16 << 10
#: Lines of the head read, and the share of them that must wear a piece for it to count.
HEAD_LINES = 200
WORN_BY = 0.9

_STAMP = re.compile(
    r"^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?[ \t]"
)
_QUOTE = re.compile(r"^(?:> ?)+")
_LABEL = re.compile(r"^ *\d{1,5}: ")
#: An editor's or `cat -n`'s line number, then two spaces or a tab.
_NUMBER = re.compile(r"^ *(\d{1,6})(?:  |\t)")
_INDENT = re.compile(r"^[ \t]+")
#: HTML's escapes of the characters logs are full of, with none of those characters bare.
_ESCAPES = re.compile(r"&(?:quot|lt|gt|#39|#x27);")
_RAW = re.compile(r"[\"<>]")


#: The field of a JSON log record that holds the line: Docker's json-file driver and
#: Fluentd write `log`, Fluent Bit, Vector and Loki exports `message` or `msg`.
RECORD_FIELDS = ("log", "message", "msg")

#: The pieces a line may wear around its text, by name; indentation is read per file.
_PIECES = {"stamp": _STAMP, "quote": _QUOTE, "label": _LABEL, "number": _NUMBER}


@dataclass(frozen=True)
class Dress:
    """What every line of one file wears: HTML escapes over the whole text, then pieces at
    the line's start, outermost first (a timestamp before quote marks, or a code block's
    indentation before them: a quoted log pasted into an indented block)."""

    escaped: bool = False
    #: (piece, indentation): a name of _PIECES, or "indent" with the whitespace it strips.
    pieces: tuple[tuple[str, str], ...] = ()
    #: The field of the JSON record each line is, when it is one (outermost of all).
    record: str = ""

    def __bool__(self) -> bool:
        return self.escaped or bool(self.pieces) or bool(self.record)

    def undress(self, line: str) -> str:
        """The line as its program wrote it. (`srun --label`'s task number is not a rank
        when srun starts one launcher per node: it is dropped, not read.)"""
        if self.record:
            line = _field(line, self.record)
        if self.escaped:
            line = html.unescape(line)
        for piece, indent in self.pieces:
            if piece != "indent":
                line = _PIECES[piece].sub("", line, count=1)
            elif line.startswith(indent):
                line = line[len(indent) :]
        return line


NAKED = Dress()


def detect(path: Path) -> Dress:
    """The dress of the file at `path`, from its head; NAKED when unreadable."""
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return NAKED
    return dress_of(head.decode("utf-8", "replace"))


def dress_of(text: str) -> Dress:
    """The dress of a text from its first HEAD_BYTES (a file's head, already read)."""
    record, text = _read_records(text[:HEAD_BYTES])
    escaped = _ESCAPES.search(text) is not None and not _RAW.search(text)
    if escaped:
        text = html.unescape(text)
    lines = [line for line in text.splitlines()[:HEAD_LINES] if line.strip()]
    if not lines:
        return Dress(escaped=escaped, record=record)
    pieces: list[tuple[str, str]] = []
    while len(pieces) < 2 * len(_PIECES) + 1:  # each piece comes off once or twice at most
        found = _outermost(lines)
        if found is None:
            break
        pieces.append(found)
        peeled = Dress(pieces=(found,))
        lines = [line for line in map(peeled.undress, lines) if line.strip()]
    return Dress(escaped, tuple(pieces), record)


def _read_records(text: str) -> tuple[str, str]:
    """(the field of the JSON records (nearly) every line of the head is, the head with each
    record replaced by its line), or ("", the head) when its lines are no such records.
    Each line is parsed once."""
    lines = text.splitlines()
    worn = [line for line in lines[:HEAD_LINES] if line.strip()]
    if not worn or not worn[0].lstrip().startswith("{"):
        return "", text
    parsed = {line: _record(line) for line in lines}
    for name in RECORD_FIELDS:
        records = sum(1 for line in worn if isinstance(parsed[line].get(name), str))
        if records >= WORN_BY * len(worn):
            return name, "\n".join(_text_of(parsed[line], name, line) for line in lines)
    return "", text


def _field(line: str, name: str) -> str:
    """The line a JSON record holds in its field; the line itself when it is no record."""
    return _text_of(_record(line), name, line)


def _record(line: str) -> dict[str, Any]:
    """The JSON object a line is, or an empty one."""
    if not line.lstrip().startswith("{"):
        return {}
    try:
        found = json.loads(line)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _text_of(record: dict[str, Any], name: str, line: str) -> str:
    """The record's field without the newline its writer ended it with, or the line itself
    when the record has no such string field."""
    value = record.get(name)
    return value.rstrip("\n") if isinstance(value, str) else line


def _outermost(lines: list[str]) -> tuple[str, str] | None:
    """The piece (nearly) every line starts with, or the indentation all of them share."""
    for piece, pattern in _PIECES.items():
        if _numbered(lines) if piece == "number" else _worn(lines, pattern):
            return piece, ""
    indent = _common_indent(lines)
    return ("indent", indent) if indent else None


def _numbered(lines: list[str]) -> bool:
    """Lines numbered one after another (a paste out of an editor or `cat -n`): the count
    itself tells it from a table whose rows start with a number; a line alone, by its 1."""
    numbers = [int(found.group(1)) if (found := _NUMBER.match(line)) else None for line in lines]
    if len(numbers) == 1:
        return numbers[0] == 1
    steps = sum(1 for a, b in itertools.pairwise(numbers) if a is not None and b == a + 1)
    return steps >= WORN_BY * (len(lines) - 1)


def _worn(lines: list[str], piece: re.Pattern[str]) -> bool:
    return sum(1 for line in lines if piece.match(line)) >= WORN_BY * len(lines)


def _common_indent(lines: list[str]) -> str:
    """The leading whitespace every line starts with (a code block's four spaces)."""
    indents = [found.group(0) if (found := _INDENT.match(line)) else "" for line in lines]
    common = indents[0] if indents else ""
    for indent in indents[1:]:
        while not indent.startswith(common):
            common = common[:-1]
        if not common:
            return ""
    return common
