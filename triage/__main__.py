"""`python -m triage` is the `triage` command."""

from triage.entry import main

main()
