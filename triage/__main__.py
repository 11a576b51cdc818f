"""`python -m triage` is the `triage` command."""

from triage.cli import main

main()
