"""The tools a model may call, and the safeguards around every call it makes.

Only tools registered as read-only are offered, and any other name is refused. A call
identical to an earlier one is refused (a model that loops costs tokens, not time).
File inputs must lie inside the evidence the user gave triage: a log line that talks a
model into reading ~/.netrc finds the call refused. Pid inputs must be the job's processes:
those the user named and the peers triage found from them on this host, never another
process whose stack or environment the model was talked into reading. Each result the model sees is bounded
(head and tail kept, the middle counted) and wrapped as evidence; every call, refused
ones included, is recorded for the report.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from triage.llm.config import LlmConfig
from triage.llm.prompt import CACHE, evidence
from triage.models import Evidence, LlmToolCall, Report
from triage.observations import RankProcess
from triage.registry import Registry, ToolRun, ToolSpec, is_path_param, path_values
from triage.text import bound_text

Block = dict[str, Any]
EXCERPT_CHARS = 600


def is_pid_param(name: str) -> bool:
    """Inputs that name processes: `pids`, `launcher_pid`, ..."""
    return name == "pids" or name.endswith(("_pid", "_pids"))


def job_pids(report: Report) -> list[int]:
    """The processes a model may touch: the ones the user named, and the job's processes
    on this host that triage found from them (a collection's pids are another host's)."""
    named = [*(report.targets.get("pids") or []), report.targets.get("launcher_pid")]
    host = socket.gethostname()
    found = [
        e.data.get("pid")
        for e in report.evidence
        if e.kind == RankProcess.EVIDENCE_KIND and e.data.get("host") == host
    ]
    return [pid for pid in [*named, *found] if isinstance(pid, int)]


def pid_values(value: Any) -> list[Any]:
    """The pids an input holds: one, or a list of them."""
    return value if isinstance(value, list) else [value]


def definition(spec: ToolSpec) -> Block:
    """A tool as the Messages API takes it: the names, descriptions and input schemas
    `triage tools list --json` shows."""
    return {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema()}


def with_cache_breakpoint(tools: list[Block]) -> list[Block]:
    """Tool definitions change never within a pass: cache them (the breakpoint on the
    last one covers them all)."""
    return [*tools[:-1], {**tools[-1], "cache_control": CACHE}] if tools else []


def tool_result(block: Block, text: str, is_error: bool = False) -> Block:
    result: Block = {"type": "tool_result", "tool_use_id": block["id"], "content": text}
    return {**result, "is_error": True} if is_error else result


class ToolBox:
    def __init__(
        self, registry: Registry, config: LlmConfig, scope: list[str], pids: list[int]
    ) -> None:
        self.registry = registry
        self.config = config
        self.specs = {spec.name: spec for spec in registry.all() if spec.read_only}
        self.pids = set(pids)
        #: When the pass ends (time.monotonic()); a tool call may not outlive it.
        self.deadline_at = time.monotonic() + config.deadline_s
        self.roots: list[Path] = []
        self.calls: list[LlmToolCall] = []
        self.runs: list[ToolRun] = []
        self.evidence: dict[str, Evidence] = {}
        self._seen: set[str] = set()
        self.widen(scope)

    def widen(self, paths: Iterable[str], pids: Iterable[int] = ()) -> None:
        """Let later calls read under these paths and these processes too (a person named
        them)."""
        self.pids.update(pids)
        for path in paths:
            root = Path(path).expanduser().resolve()
            if root not in self.roots:
                self.roots.append(root)

    def definitions(self) -> list[Block]:
        return [definition(spec) for spec in self.specs.values()]

    def execute(self, block: Block) -> tuple[Block, ToolRun | None]:
        """Run one `tool_use` block; the `tool_result` to send back, and the run if any."""
        name, params = str(block.get("name")), block.get("input")
        if not isinstance(params, dict):
            return self._refuse(block, name, {}, "the input must be a JSON object"), None
        refusal = self._refusal(name, params)
        if refusal:
            return self._refuse(block, name, params, refusal), None
        self._seen.add(_key(name, params))
        run = self.registry.run(name, params, max(self.deadline_at - time.monotonic(), 1.0))
        self.runs.append(run)
        for item in run.evidence:
            self.evidence.setdefault(item.id, item)
        result = run.result
        self.calls.append(
            LlmToolCall(
                tool=name,
                params=params,
                status=result.status.value,
                detail=result.error or "",
                evidence_ids=result.evidence_ids,
            )
        )
        text = bound_text(describe(run), self.config.result_chars)
        return tool_result(block, evidence(f"tool {name}", text), result.error is not None), run

    def _refusal(self, name: str, params: dict[str, Any]) -> str | None:
        if name not in self.specs:
            offered = ", ".join(sorted(self.specs))
            return f"{name!r} is not one of the read-only tools offered ({offered})"
        if _key(name, params) in self._seen:
            return "this exact call was already made and its result is above; change the inputs or move on"
        for param, value in params.items():
            if is_pid_param(param):
                strangers = [pid for pid in pid_values(value) if pid not in self.pids]
                if strangers:
                    return (
                        f"pid {strangers[0]} is not one of the job's processes the user named"
                        " (or their peers)"
                    )
            if not is_path_param(param):
                continue
            for path in path_values(value):
                resolved = Path(path).expanduser().resolve()
                if not any(resolved.is_relative_to(root) for root in self.roots):
                    return f"{path!r} is outside the evidence given to triage"
        return None

    def _refuse(self, block: Block, name: str, params: dict[str, Any], why: str) -> Block:
        self.calls.append(LlmToolCall(tool=name, params=params, status="refused", detail=why))
        return tool_result(block, f"refused: {why}", is_error=True)


def _key(name: str, params: dict[str, Any]) -> str:
    return name + json.dumps(params, sort_keys=True, default=str)


def describe(run: ToolRun) -> str:
    """A tool run as the model reads it: status, then each evidence item by id."""
    result = run.result
    lines = [f"status: {result.status.value}" + (f" ({result.error})" if result.error else "")]
    lines.append(f"{len(run.evidence)} evidence items, {len(run.gaps)} gaps")
    for item in run.evidence:
        rank = f" rank {item.rank}" if item.rank is not None else ""
        lines.append(f"- [{item.id}] {item.kind}{rank} at {item.source}: {item.summary}")
        if item.excerpt and item.excerpt not in item.summary:
            lines.append("  " + bound_text(item.excerpt, EXCERPT_CHARS).replace("\n", "\n  "))
    lines += [f"gap: {gap.source}: {gap.reason}" for gap in run.gaps]
    summaries = "\n".join(item.summary for item in run.evidence)
    if result.output and result.output != summaries:
        lines += ["output:", result.output]
    return "\n".join(lines)
