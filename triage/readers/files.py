"""The files under a folder a user names, the same way for every tool that walks one.

Stable order (sorted), hidden folders and files skipped (a probe's markers, partial
writes), regular files only: opening a FIFO, such as NCCL's dump pipe, blocks forever.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path


def regular_files(folder: Path) -> Iterator[Path]:
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            if not name.startswith(".") and path.is_file():
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
