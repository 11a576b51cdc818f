"""Sort the files a user names by what they are, for the tools that read each kind.

`collect_files` walks the paths a user gave (files, folders of per-rank logs, NCCL
debug files, torchelastic error files, dumps) and sorts them by what their first
bytes say, not by their names (`triage.readers.files.sniff`): logs and error files
for `scan_logs`, pickles and JSON for the dump readers, probe snapshots for
`read_probe_snapshots`.
"""

from __future__ import annotations

import heapq
import os
import re
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

from triage.models import Gap
from triage.readers.files import regular_files, sort_by_content
from triage.registry import ToolError, ToolOutput, tool
from triage.text import plural

MAX_FILES = 50_000
#: Entries walked before choosing the newest MAX_FILES: a bound on memory, not on reading.
MAX_WALKED = 1_000_000
SHOWN_SKIPPED = 3
#: Empty files named in their gap; the rest are counted.
SHOWN_EMPTY = 2
#: torchrun --log-dir's per-rank files: `attempt_0/3/stderr.log`, empty for a quiet rank.
_TORCHRUN_LOG = re.compile(r"attempt_\d+/\d+/std(?:out|err)\.log$")


def _walk(paths: list[str]) -> tuple[list[Path], list[Gap]]:
    """The files given and the regular files under the folders given; past MAX_FILES, the
    newest (a failure is in the last files written, not the first in name order)."""
    files: list[Path] = []
    gaps: list[Gap] = []
    skipped: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += islice(regular_files(path, skipped), MAX_WALKED)
        elif path.is_file():
            files.append(path)
        else:
            why = "not a regular file" if path.exists() else "no such file or directory"
            gaps.append(Gap(source=raw, reason=why, tool="collect_files"))
    if skipped:
        shown = "; ".join(skipped[:SHOWN_SKIPPED]) + ("; …" if len(skipped) > SHOWN_SKIPPED else "")
        reason = f"{plural(len(skipped), 'path')} not read: {shown}"
        gaps.append(Gap(source=paths[0], reason=reason, tool="collect_files"))
    if len(files) > MAX_FILES:
        kept = heapq.nlargest(MAX_FILES, files, key=_modified)
        gaps.append(
            Gap(
                source=paths[0],
                reason=f"{len(files):,} files: the newest {MAX_FILES:,} were read, the"
                f" {len(files) - MAX_FILES:,} oldest were not",
                hint="point triage at the job's own log folder",
                tool="collect_files",
            )
        )
        chosen = set(kept)
        files = [f for f in files if f in chosen]
    return files, gaps


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _unreadable_gap(unreadable: list[str]) -> Gap:
    """Why the first of them could not be opened (permission, most often), and how many."""
    try:
        with open(unreadable[0], "rb"):
            why = "unreadable"
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
    more = f" and {plural(len(unreadable) - 1, 'more file')}" if len(unreadable) > 1 else ""
    return Gap(source=unreadable[0], reason=f"{why}{more}", tool="collect_files")


def _empty_gap(empty: list[str]) -> Gap:
    """One gap for every empty file: torchrun leaves an empty stdout and stderr per quiet
    rank, and a report that lists each of them hides the gaps that matter."""
    per_rank = {path for path in empty if _TORCHRUN_LOG.search(path)}
    if len(empty) == 1:
        what = " (a torchrun per-rank log)" if per_rank else ""
        return Gap(source=empty[0], reason=f"empty file{what}", tool="collect_files")
    folder = os.path.commonpath(empty)
    names = [os.path.relpath(p, folder) for p in sorted(empty, key=lambda p: p in per_rank)]
    shown = ", ".join(names[:SHOWN_EMPTY]) + (", …" if len(names) > SHOWN_EMPTY else "")
    if len(per_rank) == len(empty):
        shown += " (torchrun per-rank logs)"
    elif per_rank:
        shown += f" ({len(per_rank)} of them torchrun per-rank logs)"
    return Gap(
        source=folder, reason=f"{plural(len(empty), 'empty file')}: {shown}", tool="collect_files"
    )


@tool(name="collect_files")
def collect_files(paths: list[str]) -> ToolOutput:
    """Sort the given files and folders (recursively) by content: text logs, torchelastic
    error files, triage.probe snapshots, JSON and pickle dumps (Flight Recorder, memory
    snapshots), binary files.
    Later tools read each kind; nothing is opened for writing."""
    if not paths:
        raise ToolError("no files to read", "pass log files, folders or - for stdin")
    files, gaps = _walk(paths)
    kinds = sort_by_content(files)
    if kinds.get("empty"):
        gaps.append(_empty_gap(kinds["empty"]))
    if kinds.get("unreadable"):
        gaps.append(_unreadable_gap(kinds["unreadable"]))
    binary = kinds.get("binary", [])
    if binary:
        reason = f"{plural(len(binary), 'binary file')} skipped"
        gaps.append(Gap(source=binary[0], reason=reason, tool="collect_files"))
    if not files and not gaps:
        raise ToolError("the given folders hold no files")
    counts = Counter({k: len(v) for k, v in kinds.items()})
    text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no files"
    context: dict[str, Any] = {
        "log_files": kinds.get("log", []) + kinds.get("elastic_error", []),
        "pickle_files": kinds.get("pickle", []),
        "json_files": kinds.get("json", []),
        "snapshot_files": kinds.get("probe_snapshot", []),
    }
    return ToolOutput(gaps=gaps, context={k: v for k, v in context.items() if v}, text=text)
