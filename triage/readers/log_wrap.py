"""Lines a terminal cut at its width, joined again.

A log copied out of tmux, screen or a narrow terminal comes back with every long line cut
into pieces of exactly the terminal's width: an NCCL line, a watchdog timeout or an OOM
message then no longer holds its words in one line, and no signature reads it. Such a
text shows several lines of one length, its longest, with hardly any a character or
three shorter, each followed by a line that does not start as it did (or two that end
inside a word, or before a space, where the next line goes on, or one such at a terminal's
usual width); joining each of
them with the line after it gives the log back. Lines that are merely long and alike (a
run of NCCL COLL lines) have neighbours in length and in prefix, and tables (nvidia-smi's
rows) end in a border: both are left alone. Only small files are looked at: pasted text,
not a job's logs. What a paste put around every piece (quote marks, a code block's
indentation: `triage.readers.log_dress`) comes off first, so the pieces join as the
program wrote them.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from triage.readers.log_dress import dress_of

#: Files above this are logs as the job wrote them, never a terminal's copy.
MAX_BYTES = 16 << 20
#: How much of a file's head shows whether its lines were cut.
HEAD_BYTES = 64 << 10
#: Narrower than this, a text is not cut by a terminal.
MIN_WIDTH = 60
#: Lines of exactly the width that show a text was cut there; fewer must be cut inside a
#: word at a width terminals have.
MIN_CUT = 3
TERMINAL_WIDTHS = frozenset({80, 100, 120, 132, 140, 160, 180, 200, 220, 240})
_BORDERS = ("|", "+", "-", "=", "│", "┃", "╯", "╮", "┤", "║", "*", "#")


def wrap_width(path: Path, size: int) -> int | None:
    """The width a terminal cut this file's lines at, from its head; None when they were
    not cut (the whole file is read only to join them, `unwrap`)."""
    if size > MAX_BYTES:
        return None
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    text = head.decode("utf-8", "replace")
    lines = _lines(text if len(head) < HEAD_BYTES else text[: text.rfind("\n") + 1])
    lengths = Counter(len(line) for line in lines)
    if not lengths:
        return None
    width = max(lengths)
    cut = [n for n, line in enumerate(lines[:-1]) if len(line) == width]
    if width < MIN_WIDTH or not cut:
        return None
    if len(cut) < MIN_CUT:  # one or two long lines, each cut inside a sentence
        inside = all(_continued(lines[n], lines[n + 1]) for n in cut)
        # one cut only at a terminal's width; two of exactly one length at any width (a
        # web page's or an editor's, as an issue's text box wraps)
        return width if inside and (width in TERMINAL_WIDTHS or len(cut) > 1) else None
    pieces = {n + 1 for n in cut}  # what follows a cut line is its rest, whatever its length
    near = sum(
        1 for n, line in enumerate(lines) if width - 3 <= len(line) < width and n not in pieces
    )
    if near >= len(cut):
        return None  # lengths up to the widest: lines that are long, not cut
    if sum(1 for n in cut if _bordered(lines[n])) * 2 >= len(cut):
        return None  # a table: its rows are one length because they are drawn so
    if sum(1 for n in cut if _same_start(lines[n], lines[n + 1])) * 2 >= len(cut):
        return None  # each next line starts as this one did: lines of one kind, one length
    return width


def _continued(line: str, following: str) -> bool:
    """A cut that split a word, an identifier, a dotted name or a path (`enviro` / `nment`,
    `in _pre` / `_state_dict_hook`, `huggingface.` / `co/models`), fell on the space before
    one (`line 58,` / ` in _compare`) or just after it (`Name or ` / `service not known`),
    or before punctuation no line starts with: the next line goes on with the sentence."""
    if _same_start(line, following):
        return False
    first, last = following[:1], line[-1:]
    if first == " " and following[1:2].strip():
        return not line.endswith(" ")
    if first in _NEVER_FIRST:
        return True
    goes_on = (first.isalnum() and first.lower() == first) or first == "_"
    in_name = last.isalnum() or last in "_./-"
    after_space = line.endswith(" ") and not line.endswith("  ")
    return goes_on and (in_name or after_space)


#: Characters no log line starts with: after a line of the terminal's width, the rest of
#: it (`Timeout(ms)` / `=1800000)`).
_NEVER_FIRST = frozenset("=,.:;)]}")


def _same_start(line: str, following: str) -> bool:
    """Two lines that start alike, digits aside: `[rank0]:` and `[rank1]:`, two timestamps."""
    return _DIGITS.sub("0", line[:_START]) == _DIGITS.sub("0", following[:_START])


#: Characters that tell two lines of one writer (a rank or host:pid prefix, a timestamp).
_START = 6
_DIGITS = re.compile(r"\d")


def unwrap(path: Path, width: int, dest: Path) -> tuple[list[int], int]:
    """Write `path` to `dest` with every line of `width` characters joined with the line
    after it; returns, per line written, the number of the first line it came from, and
    how many lines the file has."""
    origin: list[int] = []
    out: list[str] = []
    pending = ""
    start = 0
    lines = _lines(path.read_text(encoding="utf-8", errors="replace"))
    for number, line in enumerate(lines, 1):
        if not pending:
            start = number
        following = lines[number] if number < len(lines) else ""
        if len(line) == width and (not _bordered(line) or _border_rest(following)):
            pending += line
            continue
        out.append(pending + line)
        origin.append(start)
        pending = ""
    if pending:
        out.append(pending)
        origin.append(start)
    dest.write_text("\n".join(out) + "\n", encoding="utf-8")
    return origin, len(lines)


def _lines(text: str) -> list[str]:
    """The text's lines as their program wrote them: without CR and without the dress its
    head shows."""
    dress = dress_of(text)
    lines = [line.rstrip("\r") for line in text.split("\n")]
    lines = lines[:-1] if lines and not lines[-1] else lines
    return [dress.undress(line) for line in lines] if dress else lines


def _bordered(line: str) -> bool:
    return line.rstrip().endswith(_BORDERS)


def _border_rest(line: str) -> bool:
    """A table row's last border alone on a line (`|`, `+`): the row was one character
    wider than the terminal, and a border cut off is no row of its own."""
    return 0 < len(line) <= 2 and all(c in _BORDERS for c in line)
