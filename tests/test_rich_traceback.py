"""rich's boxed tracebacks (`rich.traceback`, as DeepSpeed-Chat and typer apps print them)
read as tracebacks: frames, the exception under the box, a path cut at the box's width."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from rich.traceback import Traceback

from tests.conftest import analyze_files
from triage.readers.logscan import scan_file

RAISED_AT = 0


def _check_world_size(world_size: int) -> None:
    global RAISED_AT
    RAISED_AT = _line() + 2
    if world_size % 3:
        raise AssertionError(f"bad value {world_size}")


def _line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def rich_traceback(width: int) -> str:
    """What rich prints for a real exception, at a terminal `width` wide."""
    try:
        _check_world_size(8)
    except AssertionError:
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(Traceback())
        return out.getvalue()
    raise AssertionError("no exception")


def test_a_rich_traceback_reads_as_a_traceback(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(rich_traceback(100))
    [record] = scan_file(log).tracebacks
    assert (record.exception, record.message) == (
        "AssertionError",
        "bad value 8",
    )
    assert [f.function for f in record.frames] == ["_check_world_size", "rich_traceback"]
    assert record.user_frame is not None
    assert (record.user_frame.file, record.user_frame.line) == (__file__, RAISED_AT)
    assert not record.dump


@pytest.mark.parametrize("width", [40, 44])
def test_a_path_cut_at_the_box_width_is_joined(tmp_path: Path, width: int) -> None:
    text = rich_traceback(width)
    assert not any(f"{__file__}:{RAISED_AT} in" in line for line in text.splitlines())
    log = tmp_path / "rank0.log"
    log.write_text(text)
    [record] = scan_file(log).tracebacks
    assert {f.file for f in record.frames} == {__file__}


def test_a_box_pasted_without_its_top_is_a_cut_traceback(tmp_path: Path) -> None:
    lines = rich_traceback(100).splitlines()
    excerpt = "\n".join(lines[1 : lines.index(next(x for x in lines if x.startswith("╰")))])
    report = analyze_files(tmp_path, {"rank0.log": excerpt + "\n"})
    [top] = report.hypotheses
    assert (top.cause_id, top.confidence) == ("config.unknown", 0.08)
    assert top.location is not None and top.location.line == RAISED_AT


def test_a_rich_table_is_no_traceback(tmp_path: Path) -> None:
    table = Table("rank", "host", "state")
    table.add_row("0", "/node/a", "ok")
    out = io.StringIO()
    Console(file=out, width=60, color_system=None).print(table)
    log = tmp_path / "rank0.log"
    log.write_text(out.getvalue())
    assert scan_file(log).tracebacks == []


def test_a_box_that_only_looked_like_a_traceback_does_not_swallow_the_next_one(
    tmp_path: Path,
) -> None:
    table = "│ /data/checkpoints/last │\n│ saved 3 shards        │\n"
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 9, in <module>\n'
        "    main()\n"
        "RuntimeError: bad value 8\n"
    )
    log = tmp_path / "rank0.log"
    log.write_text(table + traceback)
    [record] = scan_file(log).tracebacks
    assert (record.exception, [f.line for f in record.frames]) == ("RuntimeError", [9])
