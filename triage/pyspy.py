"""Where the py-spy binary is and how a dump is asked of it; stdlib only.

Shared by the stack tool and the scenario harness, which must stay light.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def binary() -> str | None:
    """py-spy on PATH, or beside this interpreter (a venv that is not on PATH)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def dump_command(py_spy: str, pid: int, with_locals: bool) -> list[str]:
    return [py_spy, "dump", "--pid", str(pid), "--json"] + (["--locals"] if with_locals else [])
