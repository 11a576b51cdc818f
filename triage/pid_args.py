"""Process ids as people type them: `--pids 1 2 3`, `--pids 1,2,3`, bare pids after a command."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

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


def _as_pid_list(value: Any) -> Any:
    """One pid, or pids in one string, as the list a model or a script meant."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        try:
            return split_pids([value], "pids")
        except TriageError as exc:
            raise ValueError(str(exc)) from None
    return value


#: A list of pids that also takes `1234` and `"1234, 1235"` (MCP, chat, tools).
PidList = Annotated[list[int], BeforeValidator(_as_pid_list)]
