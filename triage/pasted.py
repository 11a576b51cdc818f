"""Text pasted on stdin (`-` among the paths) becomes a file the tools read like any other.

The file lives only while the command runs (an exception, Ctrl-C or a TERM on the way
removes it too), holds at most `MAX_PASTE_BYTES` (`analyze - < /dev/zero` must not fill
the disk), and the report names it `<stdin>` again.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from triage.models import Gap, Report

#: More than any paste; a log this large is better given as a path, which is read whole.
MAX_PASTE_BYTES = 256 << 20
CHUNK = 1 << 20


def spool(source: BinaryIO, target: Path, limit: int = MAX_PASTE_BYTES) -> bool:
    """Copy `source` into `target`, at most `limit` bytes; whether it was cut."""
    written = 0
    with target.open("wb") as out:
        while written < limit and (chunk := source.read(min(CHUNK, limit - written))):
            out.write(chunk)
            written += len(chunk)
    return written >= limit and bool(source.read(1))


class Pasted:
    """`paths` with every `-` replaced by one temporary file holding stdin."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = list(paths)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._file = ""
        self._cut = False

    def __enter__(self) -> Pasted:
        if "-" in self.paths:
            self._scratch = tempfile.TemporaryDirectory(prefix="triage-stdin-")
            target = Path(self._scratch.name) / "stdin.log"
            try:
                self._cut = spool(sys.stdin.buffer, target)
            except BaseException:  # interrupted mid-copy: __exit__ will not run
                self._scratch.cleanup()
                raise
            self._file = str(target)
            self.paths = [self._file if p == "-" else p for p in self.paths]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()

    def restore(self, report: Report) -> Report:
        """The report with the temporary file named `<stdin>`, and a gap if stdin was cut."""
        if not self._file:
            return report
        restored = Report.model_validate_json(
            report.model_dump_json().replace(self._file, "<stdin>")
        )
        if self._cut:
            restored.gaps.insert(
                0,
                Gap(
                    source="<stdin>",
                    reason=f"only the first {MAX_PASTE_BYTES >> 20} MB of stdin were read",
                    hint="give a log this large as a file path: it is read whole",
                ),
            )
        return restored
