"""The inputs of the chat's `/run TOOL`: what the person typed, and the rest from the session.

A tool's input schema names what it takes; the session fills each input it knows (what the
opening report's tools were given and later tools found, the evidence paths and pids it
started from), so `/run scan_logs` after `triage chat --evidence logs/` reads those logs
without the person retyping them. What the person typed always wins.
"""

from __future__ import annotations

import json
import re
from itertools import islice
from pathlib import Path
from typing import Any

from triage.models import Report, ToolStatus
from triage.readers.files import regular_files
from triage.registry import ToolSpec, is_path_param

MAX_FILES = 10_000  # files under the evidence folders given to a `*_files` input


def parse_params(raw: str) -> dict[str, Any]:
    """`key=value ...` or one JSON object, as `tools run` takes them. A value is JSON when
    it reads as JSON (`paths=["a", "b"]`, spaces and all), else text up to the next space;
    single quotes hold either."""
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            whole = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"inputs are not valid JSON: {exc}") from exc
        if not isinstance(whole, dict):
            raise ValueError("inputs must be a JSON object")
        return whole
    params: dict[str, Any] = {}
    pos = 0
    while pos < len(raw):
        key = _KEY.match(raw, pos)
        if key is None:
            raise ValueError(f"tool inputs are key=value, got {raw[pos:].split()[0]!r}")
        params[key[1]], pos = _value(raw, key.end())
        pos = len(raw) - len(raw[pos:].lstrip())
    return params


_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_JSON = json.JSONDecoder()


def _value(raw: str, pos: int) -> tuple[Any, int]:
    """The value starting at `pos`, and where it ends."""
    if raw.startswith("'", pos):
        end = raw.find("'", pos + 1)
        if end < 0:
            raise ValueError("a quoted value has no closing quote")
        return _json_or_text(raw[pos + 1 : end]), end + 1
    try:
        value, end = _JSON.raw_decode(raw, pos)
    except json.JSONDecodeError:
        end = pos
    if end > pos and (end == len(raw) or raw[end].isspace()):
        return value, end
    token = raw[pos:].split(maxsplit=1)[0] if raw[pos:].strip() else ""
    return token, pos + len(token)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def opening_context(report: Report) -> dict[str, Any]:
    """What the session knows from its start: the targets, then every input the opening
    playbook's tools were given (the log files `collect_files` sorted out of a folder, the
    pids `discover_ranks` found), as the playbook built them up step by step."""
    known = dict(report.targets)
    for run in report.tool_runs:
        if run.status is not ToolStatus.error:
            known.update(run.params)
    return {k: v for k, v in known.items() if v not in (None, [], "")}


def tool_inputs(
    spec: ToolSpec, typed: dict[str, Any], context: dict[str, Any], evidence: list[str]
) -> dict[str, Any]:
    """The inputs for one run: typed ones, then the session's for every input the tool
    takes, then the evidence paths for a required path input still missing; each shaped
    to its schema."""
    schema = spec.input_schema()
    fields: dict[str, Any] = schema.get("properties", {})
    params = {k: v for k, v in context.items() if k in fields} | typed
    for name in schema.get("required", []):
        if name not in params and is_path_param(name) and evidence:
            params[name] = _files(evidence) if name.endswith(("_files", "_file")) else evidence
    return {k: _shaped(v, fields.get(k, {})) for k, v in params.items()}


def missing_inputs(spec: ToolSpec, params: dict[str, Any]) -> str | None:
    """One line naming the required inputs the session could not fill, and how to give
    them; None when nothing is missing."""
    missing = [n for n in spec.input_schema().get("required", []) if n not in params]
    if not missing:
        return None
    example = " ".join(f"{n}={'PATH' if is_path_param(n) else n.upper()}" for n in missing)
    names = " and ".join(missing)
    return (
        f"{spec.name} needs {names} and the session has none; give it: /run {spec.name} {example}"
    )


def _files(paths: list[str]) -> list[str]:
    """The files given and those under the folders given: an input named `*_files` reads
    files, not folders."""
    found: list[str] = []
    for raw in paths:
        path = Path(raw)
        found += map(str, islice(regular_files(path), MAX_FILES)) if path.is_dir() else [raw]
    return found[:MAX_FILES]


def _shaped(value: Any, field: dict[str, Any]) -> Any:
    """A list of one where the schema takes a single value becomes that value (the
    registry makes one value a list of one where a list is expected)."""
    types = {field.get("type"), *(option.get("type") for option in field.get("anyOf", []))}
    types.discard(None)
    if types and "array" not in types and isinstance(value, list) and len(value) == 1:
        return value[0]
    return value
