"""`triage mcp`: the evidence tools and whole triage runs for any agent that speaks MCP.

Every read-only tool of the registry is served under its own name, description and
input schema, so an MCP client calls exactly what `triage tools run` and the LLM loop
call; `triage_report` runs a symptom's playbook and returns the Report. Failures are
tool results with `isError` set and the one-line reason, never protocol errors, so the
calling model can read them and correct itself.

The `mcp` SDK is an optional extra and slow to import: only the `mcp` command imports
this module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from pydantic import Field, ValidationError

from triage import __version__
from triage.engine import Symptom, diagnose, found_evidence, job_targets
from triage.errors import TriageError
from triage.models import Contract, Gap, Report, ToolResult, ToolStatus
from triage.pid_args import PidList
from triage.printable import plain_text, printable
from triage.redact import redact_text, redact_value
from triage.registry import REGISTRY, ToolSpec, validation_reason
from triage.render import confidence_label
from triage.text import bound_text, format_ranks

REPORT_TOOL = "triage_report"
#: A tool call over MCP that has not answered by then comes back as an error.
CALL_DEADLINE_S = 300.0

INSTRUCTIONS = (
    "Root-cause triage for failed, hung or diverging distributed PyTorch jobs. Start with"
    " triage_report: give the job's logs or folders (paths), live rank pids or the launcher's"
    " pid, and a symptom if you know it; it returns ranked hypotheses, each with a cause ID,"
    " culprit ranks, the user-code line, the evidence and the fix. Call the single tools"
    " (collect_files, scan_logs, dump_stacks, ...) to look closer at one source. Every tool"
    " is read-only."
)


class ReportRequest(Contract):
    """The inputs of `triage_report`: a symptom and what to read."""

    symptom: Symptom = Field(
        default="analyze",
        description="analyze (the evidence names the symptom), or fix it: hang, comm-error"
        " (NCCL/gloo errors, rendezvous), oom, config (launch and setup errors), wrong-results"
        " (diverging results).",
    )
    paths: list[str] = Field(
        default_factory=list,
        description="Log files, NCCL debug files, torchelastic error files, dumps, or folders"
        " of them (read recursively).",
    )
    pids: PidList = Field(default_factory=list, description="Live rank process ids.")
    launcher_pid: int | None = Field(
        default=None, description="Pid of torchrun or the mp.spawn parent: its ranks are found."
    )
    flight_recorder: list[str] = Field(
        default_factory=list, description="Folders or files of Flight Recorder dumps."
    )


class EvidenceBrief(Contract):
    """One evidence item as a tool result lists it; `triage_report` carries them in full."""

    id: str
    kind: str
    source: str
    rank: int | None = None
    summary: str


class ToolCallOutput(Contract):
    """What a registry tool returns over MCP."""

    result: ToolResult
    evidence: list[EvidenceBrief] = Field(default_factory=list)
    gaps: list[Gap] = Field(default_factory=list)
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="Facts later tools take as inputs, e.g. collect_files' log_files for scan_logs.",
    )


def exposed_tools() -> dict[str, ToolSpec]:
    """The registry tools an MCP client may call: the read-only ones."""
    return {spec.name: spec for spec in REGISTRY.all() if spec.read_only}


def build_server(plugin_dirs: list[Path] | None = None) -> Server[Any]:
    """The MCP server over the tools registered now (load tools, rules and plugins first)."""
    specs = exposed_tools()
    read_only = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
    tool_schema = ToolCallOutput.model_json_schema(mode="serialization")
    listing = [
        types.Tool(
            name=spec.name,
            description=spec.description,
            input_schema=spec.input_schema(),
            output_schema=tool_schema,
            annotations=read_only,
        )
        for spec in specs.values()
    ]
    listing.append(
        types.Tool(
            name=REPORT_TOOL,
            description="Run triage's playbook for a symptom on a job's logs, dumps and live"
            " processes, and return the Report: hypotheses ranked by confidence (cause ID,"
            " culprit ranks, user-code location, evidence, fix), the evidence, gaps and next steps.",
            input_schema=ReportRequest.model_json_schema(),
            output_schema=Report.model_json_schema(mode="serialization"),
            annotations=read_only,
        )
    )
    dirs = list(plugin_dirs or [])

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == REPORT_TOOL:
            return await anyio.to_thread.run_sync(report_result, arguments, dirs)
        if params.name not in specs:
            known = ", ".join([*specs, REPORT_TOOL])
            return error_result(f"unknown tool {params.name!r} (known: {known})")
        return await anyio.to_thread.run_sync(tool_result, params.name, arguments)

    return Server(
        "triage",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def tool_result(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """Run a registry tool (which never raises) and shape its run for the client."""
    run = REGISTRY.run(name, arguments, CALL_DEADLINE_S)
    if run.result.status is ToolStatus.error:
        return error_result(run.result.error or f"{name} failed")
    output = ToolCallOutput(
        result=run.result,
        evidence=[
            EvidenceBrief(id=e.id, kind=e.kind, source=e.source, rank=e.rank, summary=e.summary)
            for e in run.evidence
        ],
        gaps=run.gaps,
        context=run.context,
    )
    # Some clients show the model the text only: it carries what the structure does, briefly.
    lines = [run.result.output or f"{name}: {run.result.status.value}"]
    lines += [f"Gap: {gap.source}: {gap.reason}" for gap in run.gaps]
    if run.context:  # collect_files' findings live here
        lines.append("Inputs for later tools: " + bound_text(json.dumps(run.context), 4000))
    return success_result("\n".join(lines), output.model_dump(mode="json"))


def report_result(arguments: dict[str, Any], plugin_dirs: list[Path]) -> types.CallToolResult:
    """Run a playbook the way `triage analyze` / `triage hang` do and return its Report."""
    try:
        request = ReportRequest.model_validate(arguments)
    except ValidationError as exc:
        return error_result(f"invalid input: {validation_reason(exc)}")
    launcher = request.launcher_pid is not None
    if not (request.paths or request.flight_recorder or request.pids or launcher):
        return error_result(
            "give the job's evidence (paths, flight_recorder) or its processes (pids, launcher_pid)"
        )
    targets = job_targets(
        paths=request.paths,
        pids=request.pids,
        launcher_pid=request.launcher_pid,
        flight_recorder=request.flight_recorder,
    )
    try:
        report = diagnose(request.symptom, targets, plugin_dirs)
    except TriageError as exc:
        return error_result(str(exc))
    except Exception as exc:  # an engine bug: the client gets a message, the server lives on
        return error_result(f"internal error: {type(exc).__name__}: {exc}".splitlines()[0])
    if not found_evidence(report):
        gap = report.gaps[0] if report.gaps else None
        return error_result(
            f"no evidence: {gap.source}: {gap.reason}" if gap else "no evidence could be gathered"
        )
    return success_result(summary(report), report.model_dump(mode="json"))


def summary(report: Report) -> str:
    """The verdict in a few lines: what a person would read first."""
    top = report.verdict
    if top is None:
        return (
            f"triage {report.symptom}: no hypothesis ({len(report.evidence)} evidence items,"
            f" {len(report.gaps)} gaps); see next_steps"
        )
    lines = [f"{top.cause_id} ({confidence_label(top.confidence)}): {top.title}"]
    if top.ranks:
        lines.append(f"Ranks: {format_ranks(top.ranks)}")
    if top.location is not None:
        lines.append(f"Where: {top.location}")
    if top.fix:
        lines.append(f"Fix: {top.fix}")
    if len(report.hypotheses) > 1:
        others = report.hypotheses[1:4]
        lines.append(
            "Also possible: "
            + ", ".join(f"{h.cause_id} ({confidence_label(h.confidence)})" for h in others)
        )
    return "\n".join(lines)


def success_result(text: str, structured: dict[str, Any]) -> types.CallToolResult:
    """Results go to the client's model, so secrets in logs are masked as for the LLM loop."""
    return types.CallToolResult(
        content=[types.TextContent(text=plain_text(redact_text(text)))],
        structured_content=printable(redact_value(structured)),
    )


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=plain_text(redact_text(message)))], is_error=True
    )


def serve(plugin_dirs: list[Path] | None = None) -> None:
    """Serve over stdin/stdout until the client closes stdin. Inside `stdio_server` the SDK
    points file descriptor 1 at stderr, so nothing a tool module prints, on import (the
    server is built there) or while it runs, can corrupt the protocol."""

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            server = build_server(plugin_dirs)
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
