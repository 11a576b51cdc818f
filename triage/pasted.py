"""Text pasted on stdin (`-` among the paths) becomes a file the tools read like any other.

The file lives only while the command runs, and the report names it `<stdin>` again.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import TracebackType

from triage.models import Report


class Pasted:
    """`paths` with every `-` replaced by one temporary file holding stdin."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = list(paths)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._file = ""

    def __enter__(self) -> Pasted:
        if "-" in self.paths:
            self._scratch = tempfile.TemporaryDirectory(prefix="triage-stdin-")
            target = Path(self._scratch.name) / "stdin.log"
            with target.open("wb") as out:
                while chunk := sys.stdin.buffer.read(1 << 20):
                    out.write(chunk)
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
        """The report with the temporary file named `<stdin>`."""
        if not self._file:
            return report
        return Report.model_validate_json(report.model_dump_json().replace(self._file, "<stdin>"))
