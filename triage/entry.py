"""The `triage` console script.

It starts a live hang's py-spy dumps and nvidia-smi queries, and the reading of big logs
named on `analyze`'s command line, before importing the CLI (see
`triage.readers.pyspy.start_early`, `triage.readers.early_commands` and
`triage.readers.log_chunks.start_early`): start-up is most of what on-call waits for.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

from triage.readers import early_commands, pyspy


def main() -> None:
    # pydantic scans every installed distribution for plugins the first time it builds a
    # validator, which the CLI's import does (~10 ms in this project's venv); the CLI uses
    # none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if pyspy.start_early(sys.argv[1:]):
        early_commands.start_smi_queries()
    if sys.argv[1:2] == ["analyze"]:
        from triage.readers import log_chunks

        log_chunks.start_early(sys.argv[1:])
    from triage.cli import main as run_cli

    code: str | int | None = 0
    try:
        run_cli()
    except SystemExit as stop:
        code = stop.code
    finally:
        early_commands.discard()
    leave(code)


def leave(code: str | int | None) -> NoReturn:
    """Exit without tearing the interpreter down once the output is written and the exit
    handlers ran: freeing the objects of the ~900 modules a command imports one by one took
    50-80 ms at the end of every command. Python's own exit is kept where it does more: a
    thread it would wait for, an exit message, output that failed to flush (it reports it).
    """
    waited = any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
    if waited or isinstance(code, str):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    atexit._run_exitfuncs()
    os._exit(code or 0)
