"""Report renderers: terminal (rich), markdown (incident tickets), JSON (machines)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from pydantic_core import PydanticSerializationError

from triage.models import LlmRun, LlmToolCall, Report
from triage.printable import printable

FORMATS = ("terminal", "markdown", "json")


def render_json(report: Report) -> str:
    """The report as JSON; a file name that is not UTF-8 shows its bytes as `\\xNN`."""
    try:
        return report.model_dump_json(indent=2)
    except PydanticSerializationError:
        return json.dumps(printable(report.model_dump(mode="json")), indent=2, ensure_ascii=False)


def confidence_label(value: float) -> str:
    return f"{round(value * 100)}%"


def short_path(path: str, keep: int = 2) -> str:
    """The last path components: enough to recognise a file at 80 columns."""
    parts = path.split("/")
    return "/".join(parts[-keep:]) if len(parts) > keep else path


#: Characters a path root must save to be worth its line: a long folder named twice.
MIN_SAVED = 20
#: Where a path may start in free text: not inside a word, a file name or another path.
_PATH_START = r"(?<![\w.~/-])"


def path_root(paths: Iterable[str], texts: list[str]) -> str:
    """The folder to name once and show the paths of `texts` under: of the folders that
    hold `paths`, the one that saves most (its length times its uses, less the once it is
    named), so a long prefix repeated five times in the verdict is read once. '' when none
    saves MIN_SAVED characters."""
    folders = {folder for path in paths for folder in _folders(path)}
    text = "\n".join(texts)
    saved = {
        folder: len(folder) * (len(re.findall(_PATH_START + re.escape(folder), text)) - 1)
        for folder in folders
    }
    best = max(saved, key=lambda folder: (saved[folder], -len(folder)), default="")
    return best if best and saved[best] >= MIN_SAVED else ""


def under_root(text: str, root: str) -> str:
    """`text` with the paths under `root` written relative to it; no other path is cut, so
    none becomes ambiguous."""
    return re.sub(_PATH_START + re.escape(root), "", text) if root else text


def _folders(path: str) -> list[str]:
    """'/a/b/c/f.py' -> ['/a/b/', '/a/b/c/'], 'a/b/f.py' -> ['a/b/']: the folders two or
    more levels deep above a path."""
    parts = path.split("/")
    first = 3 if path.startswith("/") else 2
    return ["/".join(parts[:end]) + "/" for end in range(first, len(parts))]


def llm_lines(run: LlmRun) -> list[str]:
    """The LLM pass in a few lines: outcome, requests and tokens (the bill), tool calls."""
    outcome = "report accepted" if run.outcome == "report" else run.outcome
    lines = [
        f"{run.model}: {outcome}",
        f"{run.steps} requests; tokens: {run.input_tokens:,} in, {run.output_tokens:,} out, "
        f"{run.cache_read_input_tokens:,} read from cache, "
        f"{run.cache_creation_input_tokens:,} written to cache",
    ]
    lines += [f"tool call: {tool_call_line(call)}" for call in run.tool_calls]
    return lines


def call_signature(call: LlmToolCall, width: int = 80) -> str:
    """`tool({"param":...})`, the inputs cut to `width` characters."""
    params = json.dumps(call.params, separators=(",", ":"), default=str)
    if len(params) > width:
        params = params[: width - 3] + "..."
    return f"{call.tool}({params})"


def tool_call_line(call: LlmToolCall) -> str:
    status = call.status + (f" ({call.detail})" if call.detail else "")
    found = f", {len(call.evidence_ids)} evidence" if call.evidence_ids else ""
    return f"{call_signature(call)}: {status}{found}"
