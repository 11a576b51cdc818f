"""The `triage` console script.

It starts a live hang's py-spy dumps before importing the CLI (see
`triage.readers.pyspy.start_early`): start-up is most of what on-call waits for.
"""

from __future__ import annotations

import sys

from triage.readers import pyspy


def main() -> None:
    pyspy.start_early(sys.argv[1:])
    from triage.cli import main as run_cli

    run_cli()
