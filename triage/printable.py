"""Text from the filesystem, made printable.

A file name is bytes; Python hands a name that is not UTF-8 (`rank3_\\xff.log`) over as a
string with surrogates, which opens the file but cannot be encoded: JSON, the terminal and
the MCP client would fail on it. Outputs show such bytes as `\\xff`, and keep every other
character as it is.
"""

from __future__ import annotations

from typing import Any, TextIO


def printable_text(text: str) -> str:
    """`text` with each undecodable byte shown as `\\xNN`."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogateescape")
        return raw.decode("utf-8", "backslashreplace")
    return text


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
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(printable_text(text))

    def __getattr__(self, name: str) -> Any:  # isatty, flush, encoding, fileno: the stream's
        return getattr(self.stream, name)
