"""IPython's tracebacks (a notebook, `ipython script.py`, Colab) read as tracebacks: the
exception's type above the frames, numbered source lines and blank lines between them,
the exception line below; an excerpt pasted from the middle reads too."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.conftest import analyze_files
from triage.readers.logscan import scan_file

MODULE = """\
def scatter(x):
    return chunk(x)


def chunk(x):
    raise RuntimeError("chunk expects at least a 1-dimensional tensor")
"""

#: IPython 7's form, as a public report pasted it from a notebook (indented by its
#: markdown export): `PATH in FUNC(ARGS)`, the line on the arrow below it.
IPYTHON7 = (Path(__file__).parent / "fixtures" / "ipython7_excerpt.txt").read_text()


@pytest.fixture
def notebook_traceback(tmp_path: Path) -> Iterator[str]:
    """What IPython prints for a cell whose call raises in a module of `tmp_path`."""
    (tmp_path / "chunking.py").write_text(MODULE)
    sys.path.insert(0, str(tmp_path))
    shell = InteractiveShell.instance(colors="nocolor")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            shell.run_cell("import chunking\nx = 1\nchunking.scatter(x)\n")  # type: ignore[no-untyped-call]
        yield out.getvalue()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("chunking", None)
        InteractiveShell.clear_instance()


def test_a_notebook_traceback_reads_as_a_traceback(tmp_path: Path, notebook_traceback: str) -> None:
    assert "Traceback (most recent call last)" in notebook_traceback
    log = tmp_path / "cell.log"
    log.write_text(notebook_traceback)
    [record] = scan_file(log).tracebacks
    assert (record.exception, record.message) == (
        "RuntimeError",
        "chunk expects at least a 1-dimensional tensor",
    )
    module = str(tmp_path / "chunking.py")
    assert [(f.file, f.line, f.function) for f in record.frames[:2]] == [
        (module, 6, "chunk"),
        (module, 2, "scatter"),
    ]
    assert record.frames[2].file.startswith("<cell In[") and record.frames[2].line == 3
    assert record.user_frame is not None and record.user_frame.line == 6
    assert not record.dump


def test_an_excerpt_from_the_middle_reads_from_its_first_frame(
    tmp_path: Path, notebook_traceback: str
) -> None:
    lines = notebook_traceback.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("File "))
    log = tmp_path / "cell.log"
    log.write_text("\n".join(lines[start:]) + "\n")
    [record] = scan_file(log).tracebacks
    assert record.exception == "RuntimeError"
    assert [f.function for f in record.frames] == ["chunk", "scatter"]


def test_ipython_7_frames_take_their_line_from_the_arrow(tmp_path: Path) -> None:
    log = tmp_path / "cell.log"
    log.write_text(IPYTHON7)
    [record] = scan_file(log).tracebacks
    assert record.exception == "RuntimeError" and record.message.startswith("CUDA out of memory")
    assert [(f.function, f.line) for f in record.frames] == [("_call_impl", 722), ("train", 36)]
    assert record.user_frame is not None and record.user_frame.line == 36
    report = analyze_files(tmp_path, {"rank0.log": IPYTHON7})
    assert report.hypotheses[0].cause_id.startswith("oom.")
    location = report.hypotheses[0].location
    assert location is not None and location.line == 36
