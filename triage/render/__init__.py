"""Report renderers: terminal (rich), markdown (incident tickets), JSON (machines)."""

from __future__ import annotations

import json

from triage.models import LlmRun, LlmToolCall, Report

FORMATS = ("terminal", "markdown", "json")


def render_json(report: Report) -> str:
    return report.model_dump_json(indent=2)


def confidence_label(value: float) -> str:
    return f"{round(value * 100)}%"


def short_path(path: str, keep: int = 2) -> str:
    """The last path components: enough to recognise a file at 80 columns."""
    parts = path.split("/")
    return "/".join(parts[-keep:]) if len(parts) > keep else path


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
