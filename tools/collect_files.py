"""Sort the files a user names by what they are, for the tools that read each kind.

`collect_files` walks the paths a user gave (files, folders of per-rank logs, NCCL
debug files, torchelastic error files, dumps) and sorts them by what their first
bytes say, not by their names (`triage.readers.files.sniff`): logs and error files
for `scan_logs`, pickles and JSON for the dump readers, probe snapshots for
`read_probe_snapshots`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from triage.models import Gap
from triage.readers.files import regular_files, sort_by_content
from triage.registry import ToolError, ToolOutput, tool

MAX_FILES = 50_000


def _walk(paths: list[str]) -> tuple[list[Path], list[Gap]]:
    """The files given and the regular files under the folders given, up to MAX_FILES."""
    files: list[Path] = []
    gaps: list[Gap] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in regular_files(path):
                files.append(found)
                if len(files) > MAX_FILES:
                    break
        elif path.is_file():
            files.append(path)
        else:
            why = "not a regular file" if path.exists() else "no such file or directory"
            gaps.append(Gap(source=raw, reason=why, tool="collect_files"))
    if len(files) > MAX_FILES:
        gaps.append(
            Gap(
                source=paths[0],
                reason=f"more than {MAX_FILES} files: only the first {MAX_FILES} were read",
                hint="point triage at the job's own log folder",
                tool="collect_files",
            )
        )
        files = files[:MAX_FILES]
    return files, gaps


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
    empty = kinds.get("empty", [])
    if empty:  # torchrun leaves an empty stderr.log per quiet rank: one line says it
        more = f" and {len(empty) - 1} more" if len(empty) > 1 else ""
        gaps.append(Gap(source=empty[0], reason=f"empty file{more}", tool="collect_files"))
    skipped = kinds.get("binary", []) + kinds.get("unreadable", [])
    if skipped:
        gaps.append(
            Gap(
                source=skipped[0],
                reason=f"{len(skipped)} binary or unreadable files skipped",
                tool="collect_files",
            )
        )
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
