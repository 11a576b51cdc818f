"""Text from the filesystem and from logs, made printable and harmless.

A file name is bytes; Python hands a name that is not UTF-8 (`rank3_\\xff.log`) over as a
string with surrogates, which opens the file but cannot be encoded: JSON, the terminal and
the MCP client would fail on it. Outputs show such bytes as `\\xff`. Control characters
in a file name or a log line (an escape sequence that recolours the terminal, retitles it
or writes its clipboard) are shown as `\\x1b` in every text output, and every other
character is kept as it is.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

#: C0 controls but tab and newline, DEL, and C1 controls (0x9b is a CSI of its own).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable_text(text: str) -> str:
    """`text` with each undecodable byte shown as `\\xNN`."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogateescape")
        return raw.decode("utf-8", "backslashreplace")
    return text


def visible_controls(text: str) -> str:
    """`text` with its control characters shown as `\\xNN`."""
    return _CONTROLS.sub(lambda found: f"\\x{ord(found[0]):02x}", text)


def plain_text(text: str) -> str:
    """`text` printable, with its control characters shown as `\\xNN`."""
    return visible_controls(printable_text(text))


def printable(value: Any) -> Any:
    """A JSON-shaped value (dicts, lists, strings, numbers) with every string printable."""
    if isinstance(value, str):
        return printable_text(value)
    if isinstance(value, dict):
        return {printable(key): printable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [printable(item) for item in value]
    return value


class PrintableStream:
    """A text stream that writes what it is given printable (rich's console writes here)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream: TextIO = stream

    def write(self, text: str) -> int:
        written: int = self.stream.write(printable_text(text))
        return written

    def __getattr__(self, name: str) -> Any:  # isatty, flush, encoding, fileno: the stream's
        return getattr(self.stream, name)
