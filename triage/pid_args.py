"""Process ids as people type them: `--pids 1 2 3`, `--pids 1,2,3`, bare pids after a command."""

from __future__ import annotations

from triage.errors import TriageError


def split_pids(values: list[str], what: str = "--pids") -> list[int]:
    """Every pid in `values`, in order; anything else is a usage error naming `what`."""
    out = []
    for value in values:
        for part in value.replace(",", " ").split():
            if not part.isdigit():
                raise TriageError(f"{what} must be process ids, got {part!r}")
            out.append(int(part))
    return out
