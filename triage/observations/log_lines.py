"""Logs: failure signatures, tracebacks and the files they were read from."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from triage.observations.payload import Payload
from triage.observations.ranks import Frame

#: The signatures of lines a job printed about itself (a rank's values, its world): facts to
#: compare across ranks, never a failure.
PRINTED_FAMILY = "printed."


def is_printed(signature: str) -> bool:
    """Whether a signature is one of a job's own prints (PRINTED_FAMILY)."""
    return signature.startswith(PRINTED_FAMILY)


class LogSignal(Payload):
    """A log line matching a known failure signature, attributed to a rank where the log shows it."""

    EVIDENCE_KIND: ClassVar[str] = "log_signal"

    signature: str = Field(
        description="Name from the signature table, e.g. 'nccl.watchdog_timeout'."
    )
    text: str = Field(description="The matching line (bounded), prefixes stripped.")
    path: str
    line: int = Field(description="1-based line number in the file.")
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    device: int | None = Field(
        default=None, description="The CUDA device NCCL's `host:pid:tid [dev]` prefix names."
    )
    peer_symptom: bool = Field(
        default=False, description="The line reports another rank's failure, not its own."
    )
    fields: dict[str, Any] = Field(default_factory=dict)


class TracebackRecord(Payload):
    """A Python traceback or a stack dump found in a log, innermost frame first."""

    EVIDENCE_KIND: ClassVar[str] = "traceback"

    path: str
    line: int
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    exception: str | None = Field(default=None, description="Exception type, e.g. 'RuntimeError'.")
    message: str = ""
    frames: list[Frame] = Field(default_factory=list, description="Innermost first.")
    user_frame: Frame | None = Field(default=None, description="Innermost frame of user code.")
    dump: bool = Field(
        default=False,
        description="A stack dump of a live process (faulthandler, py-spy, or a traceback "
        "forced by Ctrl-C or a launcher's SIGTERM), not the error itself.",
    )


class LogFile(Payload):
    """A file the log scanner read, and what it learned about the file as a whole."""

    EVIDENCE_KIND: ClassVar[str] = "log_file"

    path: str
    size: int
    rank: int | None = Field(
        default=None,
        description="The rank whose log this is: the one its name gives, else the one rank "
        "every ranked line in it names (a launcher's log, naming several, has none).",
    )
    lines: int = Field(description="Lines in the file.")
    truncated_hits: int = Field(default=0, description="Matches dropped to bound memory.")
    last_line: str = Field(default="", description="Its last non-empty line: where it stops.")
    tail: list[str] = Field(
        default_factory=list, description="Its last few non-empty lines, in order."
    )
    aggregated: int = Field(
        default=0,
        description="Frequent lines (per-op NCCL COLL lines) folded into series (`log_series`).",
    )
    noise: int = Field(default=0, description="Lines holding an anchor that no signature matched.")


class LogSeries(Payload):
    """A frequent signature's lines in one file, folded into one series per key (per
    communicator for NCCL's COLL lines): how many, where they start and stop, and the last
    one's fields, which say how far the writer got (the lagging rank's last opCount). Its
    first and last lines are also `log_signal` evidence."""

    EVIDENCE_KIND: ClassVar[str] = "log_series"

    signature: str
    writer: str = Field(
        default="", description="The prefix naming who wrote it: `[rank3]:`, NCCL's `host:pid:`."
    )
    name: str = Field(
        description="What tells the series apart: its key field and value, e.g. "
        "'comm 0x55d0b3a4c2e0' (NCCL's communicator)."
    )
    path: str
    rank: int | None = None
    count: int = Field(description="Lines of this series in the file.")
    first_line: int
    last_line: int
    last: dict[str, Any] = Field(
        default_factory=dict, description="Fields of its last line (e.g. opcount, coll, nranks)."
    )
