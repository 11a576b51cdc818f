"""The files under a folder a user names, the same way for every tool that walks one,
and what each file is by its first bytes.

Stable order (sorted), hidden folders and files skipped (a probe's markers, partial
writes), regular files only: opening a FIFO, such as NCCL's dump pipe, blocks forever.
Nothing outside the folder is read through a link inside it.
A file is sorted by what its first bytes say, not by its name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from triage.observations import is_probe_snapshot
from triage.readers.log_dress import RECORD_FIELDS

SNIFF = 8192


def regular_files(folder: Path, skipped: list[str] | None = None) -> Iterator[Path]:
    """The regular files under `folder`. A link to a file outside it is not followed (the
    user named the folder, not what its links point at), and links to folders are not
    walked; an unreadable subfolder is skipped. What was skipped, and why, goes to `skipped`."""
    root = folder.resolve()

    def unreadable(exc: OSError) -> None:
        if skipped is not None:
            skipped.append(f"{exc.filename}: {(exc.strerror or str(exc)).lower()}")

    for base, dirs, names in os.walk(folder, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(base) / name
            if name.startswith("."):
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                if skipped is not None:
                    skipped.append(f"{path}: a link to {path.resolve()}, outside {folder}")
                continue
            if path.is_file():
                yield path


def files_by_head(
    folder: Path, accept: Callable[[bytes], bool], head: int, limit: int
) -> list[str]:
    """Up to `limit` files under `folder` whose first `head` bytes `accept` takes."""
    found: list[str] = []
    for path in regular_files(folder):
        try:
            with path.open("rb") as handle:
                start = handle.read(head)
        except OSError:
            continue
        if accept(start):
            found.append(str(path))
            if len(found) >= limit:
                break
    return found


def sniff(path: Path) -> str:
    """'log', 'pickle', 'json', 'elastic_error', 'probe_snapshot', 'empty' or 'binary', from
    the first bytes."""
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF)
    except OSError:
        return "unreadable"
    if not head:
        return "empty"
    if head[0] == 0x80 and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    if is_probe_snapshot(head):  # even one cut off while written: its reader says so
        return "probe_snapshot"
    if head.lstrip()[:1] in (b"{", b"[") and _looks_like_json(head):
        if b'"message"' in head and (b'"extraInfo"' in head or b'"py_callstack"' in head):
            return "elastic_error"
        return "log" if _log_record(head) else "json"
    if b"\x00" in head:
        return "binary"
    text = head.decode("utf-8", "replace")
    odd = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\n\r\t\f\x1b"))
    return "binary" if odd > len(text) * 0.1 else "log"


def _looks_like_json(head: bytes) -> bool:
    """A JSON document, possibly cut by the sniff window; `[rank0]: ...` log lines are not."""
    text = head.decode("utf-8", "replace").lstrip()
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text) - 1 or exc.msg.startswith("Unterminated string")
        return cut and len(head) == SNIFF
    return not text[end:].strip()


def _log_record(head: bytes) -> bool:
    """One line of a JSON-lines log (Docker's json-file driver, a log shipper's export): a
    flat record whose line is a string field (`triage.readers.log_dress`)."""
    try:
        record = json.loads(head)
    except ValueError:
        return False
    return (
        isinstance(record, dict)
        and any(isinstance(record.get(name), str) for name in RECORD_FIELDS)
        and all(not isinstance(value, (dict, list)) for value in record.values())
    )


def sort_by_content(files: Iterable[Path]) -> dict[str, list[str]]:
    """The files by what `sniff` says they are, each kind in the order given."""
    kinds: dict[str, list[str]] = {}
    for path in files:
        kinds.setdefault(sniff(path), []).append(str(path))
    return kinds
