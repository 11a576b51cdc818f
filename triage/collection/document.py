"""The collection document: what `triage collect` saw on one node, for a merge elsewhere.

It carries the same Evidence items `triage hang` gathers, so a merge is a concatenation,
plus the node's name and what could not be read. It is versioned on its own: a document
from another triage version is refused with the reason rather than half read. One
document is one line of JSON: a file of many (`cat nodes/* > job.jsonl`) with one broken
line loses that line only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from triage.models import Contract, Evidence, Gap, ToolResult
from triage.readers.object_bounds import TooManyObjects, check_json
from triage.registry import collector_paused, validation_reason

COLLECTION_FORMAT = "triage.collection"
#: Changes whenever a field is added or its meaning changes: documents are read only by
#: the version that wrote them (unknown fields are an error in every contract).
COLLECTION_SCHEMA = "1.0"
#: A node runs a handful of ranks; this many items means logs, and the head is what counts.
MAX_EVIDENCE = 2000
MAX_READ_BYTES = 512 << 20


class Selection(Contract):
    """How the collector chose the job's processes on its node (one way is given)."""

    pids: list[int] = Field(default_factory=list)
    launcher_pid: int | None = None
    slurm_job: str | None = Field(default=None, description="JOBID or JOBID.STEP.")
    run_id: str | None = Field(default=None, description="TORCHELASTIC_RUN_ID.")
    master: str | None = Field(default=None, description="MASTER_ADDR:MASTER_PORT.")

    def describe(self) -> str:
        if self.slurm_job:
            return f"Slurm job {self.slurm_job}"
        if self.run_id:
            return f"TORCHELASTIC_RUN_ID={self.run_id}"
        if self.master:
            return f"master {self.master}"
        if self.launcher_pid is not None:
            return f"launcher pid {self.launcher_pid}"
        return "pids " + ",".join(map(str, self.pids)) if self.pids else "files only"


class Collection(Contract):
    """One node's evidence of one job: its ranks' processes, stacks and environment, this
    host's facts, the logs and dumps it was given, and its gaps."""

    format: Literal["triage.collection"] = "triage.collection"
    schema_version: str = COLLECTION_SCHEMA
    collector_version: str
    host: str = Field(description="This host's name (hostname).")
    node: str = Field(description="The node's name: --node-name, SLURMD_NODENAME or the host.")
    collected_at: datetime
    duration_s: float
    selection: Selection
    ranks: list[int] = Field(default_factory=list, description="Ranks whose stack was read.")
    evidence: list[Evidence] = Field(default_factory=list)
    gaps: list[Gap] = Field(default_factory=list)
    tool_runs: list[ToolResult] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


#: A document and where it came from: a path, `path#2` for the second in a file, `<stdin>`.
Sourced = tuple[str, Collection]


def read_collections(paths: list[str]) -> tuple[list[Sourced], list[Gap]]:
    """Every document in files, folders (their files named *.json*: `rpdcp` appends the
    node, `triage.json.node01`) and stdin (`-`); a file that cannot be read or parsed, or
    holds a document of another version, is a gap."""
    documents: list[Sourced] = []
    gaps: list[Gap] = []
    for path, text, problem in _texts(paths):
        if problem is not None:
            gaps.append(_gap(path, problem))
            continue
        found, bad = documents_in(text, path)
        documents += found
        gaps += bad
    return documents, gaps


def _texts(paths: list[str]) -> Iterator[tuple[str, str, str | None]]:
    """(label, text, why it cannot be read) for each input file."""
    for raw in paths:
        if raw == "-":
            yield "<stdin>", sys.stdin.read(), None
            continue
        path = Path(raw)
        files = [path]
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.json*") if p.is_file())
            if not files:
                yield raw, "", "no *.json files in this folder"
        for file in files:
            try:
                if file.stat().st_size > MAX_READ_BYTES:
                    yield str(file), "", f"larger than {MAX_READ_BYTES >> 20} MiB"
                    continue
                yield str(file), file.read_text(encoding="utf-8", errors="replace"), None
            except OSError as exc:
                yield str(file), "", exc.strerror or str(exc)


@collector_paused()
def documents_in(text: str, label: str) -> tuple[list[Sourced], list[Gap]]:
    """The documents in one text: concatenated JSON (pretty-printed or not), else one per
    line, the lines that do not parse left out as gaps."""
    gaps: list[Gap] = []
    try:
        check_json(text)
    except TooManyObjects as exc:
        return [], [_gap(label, str(exc))]
    try:
        values = list(_json_values(text))
        items = [
            (label if len(values) == 1 else f"{label}#{n + 1}", v) for n, v in enumerate(values)
        ]
    except ValueError as exc:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            try:
                items += [(f"{label}:{number}", json.loads(line))] if line else []
            except ValueError:
                gaps.append(_gap(f"{label}:{number}", "not JSON"))
        if not any(isinstance(v, dict) and v.get("format") == COLLECTION_FORMAT for _, v in items):
            return [], [_gap(label, f"not JSON: {exc}")]
    if not items:
        return [], [_gap(label, "empty: no collection document")]
    documents: list[Sourced] = []
    for where, value in items:
        parsed = _collection(value)
        if isinstance(parsed, Collection):
            documents.append((where, parsed))
        else:
            gaps.append(_gap(where, parsed))
    return documents, gaps


def _json_values(text: str) -> Iterator[Any]:
    decoder = json.JSONDecoder()
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return
        value, position = decoder.raw_decode(text, position)
        yield value


def _collection(value: Any) -> Collection | str:
    """The document, or why it is not one this triage reads."""
    if not isinstance(value, dict) or value.get("format") != COLLECTION_FORMAT:
        return f'not a triage collection (no "format": "{COLLECTION_FORMAT}")'
    version = value.get("schema_version")
    if version != COLLECTION_SCHEMA:
        return f"schema version {version}, this triage reads {COLLECTION_SCHEMA}"
    try:
        return Collection.model_validate(value)
    except ValidationError as exc:
        return f"invalid collection: {validation_reason(exc)[:300]}"


def _gap(source: str, reason: str) -> Gap:
    return Gap(
        source=source,
        reason=reason,
        hint="collect that node again with `triage collect` (the same triage version)",
        tool="read_collections",
    )
