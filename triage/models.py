"""Contracts between tools, rules, the engine and renderers.

Every model here is part of the JSON a user or an agent sees (`--json`), so fields are
added, never renamed; `Report.schema_version` changes when a field's meaning does.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# 1.1: symptoms have one name each (comm-error, wrong-results); rank_groups[].rank_pids.
SCHEMA_VERSION = "1.1"


class Contract(BaseModel):
    """Base for every contract: unknown fields are an error, so typos surface early."""

    # Schemas build on first use: start-up time is what on-call waits for.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Location(Contract):
    """A place in user code: where ranks wait, diverge or fail."""

    file: str
    line: int | None = None
    function: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where} in {self.function}" if self.function else where


class Evidence(Contract):
    """One observation a tool made, attributable to a source and, where known, a rank."""

    id: str = Field(description="Stable reference used by findings, e.g. 'stack:rank3'.")
    kind: str = Field(description="What was observed: 'process', 'stack', 'missing_rank', ...")
    source: str = Field(description="Where it came from: 'pid:1234', a path, a host.")
    rank: int | None = None
    summary: str
    data: dict[str, Any] = Field(default_factory=dict)
    excerpt: str | None = Field(default=None, description="Bounded raw text backing it.")


class Gap(Contract):
    """Evidence that could not be gathered, and why: a report states what it did not see."""

    source: str
    reason: str
    hint: str | None = Field(default=None, description="What the user can do about it.")
    tool: str | None = None


class ToolStatus(StrEnum):
    ok = "ok"
    error = "error"
    no_data = "no_data"


class ToolResult(Contract):
    """The outcome of one tool call, as recorded in the report and shown to an LLM."""

    tool: str
    status: ToolStatus
    params: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = 0.0
    output: str = Field(default="", description="Bounded text rendering: head and tail kept.")
    error: str | None = None
    evidence_ids: list[str] = Field(default_factory=list)


def _ids_required(schema: dict[str, Any]) -> None:
    """Every published Finding carries both IDs; only a rule may leave them to `@rule`, so
    the schema shows them required and without a default."""
    for name in ("rule_id", "cause_id"):
        schema["properties"][name].pop("default", None)
    schema["required"] = ["rule_id", "cause_id", *schema.get("required", [])]


class Finding(Contract):
    """One ranked root-cause hypothesis; `cause_id` comes from the taxonomy."""

    # A rule's findings get its rule and cause IDs from `@rule`, which stamps them.

    model_config = ConfigDict(json_schema_extra=_ids_required)

    rule_id: str = ""
    cause_id: str = ""
    title: str
    summary: str
    ranks: list[int] = Field(default_factory=list, description="Culprit ranks.")
    location: Location | None = None
    other_locations: list[Location] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[str] = Field(default_factory=list, description="Evidence ids.")
    fix: str = ""
    confirm: str = Field(
        default="", description="Evidence that would confirm this hypothesis over its rivals."
    )


class RankGroup(Contract):
    """Ranks whose state is identical, so thousands of ranks read as a few lines."""

    state: str
    ranks: list[int]
    pids: list[int] = Field(default_factory=list, description="Processes whose rank is unknown.")
    rank_pids: dict[int, int] = Field(
        default_factory=dict,
        description="Each rank's process id, where a live process was read (on its own node).",
    )
    nodes: list[str] = Field(
        default_factory=list, description="Node names of its ranks, when collections gave them."
    )
    detail: str = ""
    location: Location | None = None


class LlmToolCall(Contract):
    """One tool call a model asked for, as made (or refused) on this machine."""

    tool: str
    params: dict[str, Any] = Field(default_factory=dict)
    status: str = Field(description="The tool's status (ok/error/no_data) or 'refused'.")
    detail: str = Field(default="", description="The error or why the call was refused.")
    evidence_ids: list[str] = Field(default_factory=list)


class LlmRun(Contract):
    """What an LLM pass over the report did and cost: enough to audit it from the JSON."""

    model: str
    steps: int = Field(default=0, description="Requests sent to the Messages API.")
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    tool_calls: list[LlmToolCall] = Field(default_factory=list)
    outcome: str = Field(
        description="'report' when the model's report was accepted, else 'fallback: <why>'."
    )
    explanation: str = Field(default="", description="The model's reasoning, in its words.")

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


class Report(Contract):
    """What `triage` concluded: hypotheses best first, and everything they rest on."""

    schema_version: str = SCHEMA_VERSION
    symptom: str
    playbook: str
    targets: dict[str, Any] = Field(default_factory=dict)
    hypotheses: list[Finding] = Field(default_factory=list)
    rank_groups: list[RankGroup] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    tool_runs: list[ToolResult] = Field(default_factory=list)
    gaps: list[Gap] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    llm: LlmRun | None = Field(
        default=None, description="The LLM pass (--llm, chat): model, tokens, tool calls."
    )

    @property
    def verdict(self) -> Finding | None:
        return self.hypotheses[0] if self.hypotheses else None
