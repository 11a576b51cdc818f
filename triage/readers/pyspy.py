"""Where the py-spy binary is and how a dump is asked of it; stdlib only.

Shared by the stack tool, the scenario harness and the console script, which must stay
light: `start_early` runs before the CLI has imported anything.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

#: Dumps started before the CLI loaded, by pid: (binary, process). See `start_early`.
_early: dict[int, tuple[str, subprocess.Popen[str]]] = {}


def binary() -> str | None:
    """py-spy on PATH, or beside this interpreter (a venv that is not on PATH)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def dump_command(py_spy: str, pid: int, with_locals: bool) -> list[str]:
    return [py_spy, "dump", "--pid", str(pid), "--json"] + (["--locals"] if with_locals else [])


def start_dump(py_spy: str, pid: int, with_locals: bool) -> subprocess.Popen[str]:
    """A py-spy dump of `pid`, running; its JSON comes on stdout, its reason on stderr."""
    return subprocess.Popen(
        dump_command(py_spy, pid, with_locals),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def start_early(argv: list[str]) -> None:
    """For `triage hang --pids P...`, start the first py-spy dump of each pid now.

    Importing the CLI (typer, pydantic, the engine) takes longer than dumping every rank,
    and the dumps need none of it: started first, they run on another core meanwhile, and
    they catch the ranks as close as possible to the moment the user asked. Only the
    unambiguous form is read (`hang` first, then `--pids` and the bare pids after it);
    anything else waits for the dump tool as usual. `take_early` hands a dump over.
    """
    if not argv or argv[0] != "hang":
        return
    pids: list[int] = []
    taking = False
    for token in argv[1:]:
        if token.startswith("--pids="):
            token, taking = token.removeprefix("--pids="), True
        elif token == "--pids":
            taking = True
            continue
        elif token.startswith("-"):
            taking = False
            continue
        if taking:
            pids += [int(p) for p in token.replace(",", " ").split() if p.isdigit()]
    found = binary() if pids else None
    if found is None:
        return
    for pid in dict.fromkeys(pids):
        try:
            _early[pid] = (found, start_dump(found, pid, with_locals=False))
        except OSError:
            return


def take_early(py_spy: str, pid: int) -> subprocess.Popen[str] | None:
    """The dump `start_early` began for `pid` with this binary, once; None otherwise."""
    started = _early.pop(pid, None)
    if started is None or started[0] != py_spy:
        return None
    return started[1]
