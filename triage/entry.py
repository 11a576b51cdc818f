"""The `triage` console script.

It starts a live hang's py-spy dumps and nvidia-smi queries, and the reading of big logs
named on `analyze`'s command line, before importing the CLI (see
`triage.readers.pyspy.start_early`, `triage.readers.early_commands` and
`triage.readers.log_chunks.start_early`): start-up is most of what on-call waits for.
"""

from __future__ import annotations

import os
import sys

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

    try:
        run_cli()
    finally:
        early_commands.discard()
