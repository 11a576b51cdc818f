"""The one error type users see as a one-line message (CLI exit code 2).

Kept free of heavy imports so the CLI can catch it before loading the engine.
"""


class TriageError(Exception):
    """A user-facing failure: bad input, a broken playbook, a demo that cannot run."""
