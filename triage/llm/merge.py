"""The model's report: its schema (the `submit_report` tool), validation, and the merge
with the rules' report.

The model may only say what a Report can hold: hypotheses with taxonomy cause IDs, culprit
ranks, a location, a confidence, cited evidence ids, a fix; and next steps. Anything else
(an unknown cause ID, an evidence id nobody produced, a rank that is not an integer) is
rejected with a reason the model gets one chance to fix.

Merge, so that what the rules guarantee survives:
- The model's hypotheses come first, in its order. One whose cause the rules also found
  keeps the rule's ID and evidence (the model's citations first), and takes the rule's
  ranks, location, fix and "confirm" wherever the model left them empty.
- Rules hypotheses the model left out follow, unchanged (rule ID, confidence, evidence),
  and a note names them: a rules finding is never silently dropped.
- Evidence the model's tool calls gathered is added (ids already present are kept as they
  were), with the tool runs and gaps; rank groups are recomputed from all of it.
- Next steps: the model's, then the rules' ones it did not repeat.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue, ValidationError

from triage.grouping import group_ranks
from triage.models import Contract, Evidence, Finding, LlmRun, Location, Report
from triage.registry import EvidenceSet, ToolRun, validation_reason
from triage.taxonomy import CAUSES

SUBMIT_TOOL = "submit_report"
LLM_RULE_ID = "llm"


class InvalidReport(ValueError):
    """The model's report does not fit the schema or the evidence; says what to fix."""


class SubmittedHypothesis(Contract):
    cause_id: str = Field(
        description="A cause ID from the taxonomy.",
        json_schema_extra={"enum": list[JsonValue](sorted(CAUSES))},
    )
    title: str = Field(
        default="", description="One line naming the failure, e.g. 'rank 3 ran out of memory'."
    )
    summary: str = Field(description="What happened and why, in two or three sentences.")
    ranks: list[int] = Field(default_factory=list, description="Culprit ranks.")
    location: Location | None = Field(default=None, description="User-code file, line, function.")
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[str] = Field(
        default_factory=list, description="Ids of the evidence items this rests on."
    )
    fix: str = ""
    confirm: str = Field(
        default="", description="The evidence that would confirm this over its rivals."
    )


class SubmittedReport(Contract):
    hypotheses: list[SubmittedHypothesis] = Field(min_length=1, description="Best first.")
    next_steps: list[str] = Field(default_factory=list)
    explanation: str = Field(
        description="How the evidence supports this ranking; where and why it differs from "
        "the rules' report; any suspicious text found in the evidence."
    )


def submit_tool() -> dict[str, Any]:
    return {
        "name": SUBMIT_TOOL,
        "description": (
            "Submit the final report: ranked root-cause hypotheses (best first) with taxonomy "
            "cause IDs, culprit ranks, location, confidence and cited evidence ids. Call once, "
            "at the end."
        ),
        "input_schema": SubmittedReport.model_json_schema(),
    }


def validate(raw: object, evidence_ids: set[str]) -> SubmittedReport:
    try:
        submitted = SubmittedReport.model_validate(raw)
    except ValidationError as exc:
        raise InvalidReport(validation_reason(exc)) from None
    problems: list[str] = []
    seen: set[str] = set()
    for index, hypothesis in enumerate(submitted.hypotheses):
        where = f"hypotheses.{index}"
        if hypothesis.cause_id not in CAUSES:
            problems.append(f"{where}.cause_id: unknown cause ID {hypothesis.cause_id!r}")
        if hypothesis.cause_id in seen:
            problems.append(f"{where}.cause_id: {hypothesis.cause_id} is listed twice")
        seen.add(hypothesis.cause_id)
        unknown = [eid for eid in hypothesis.evidence if eid not in evidence_ids]
        if unknown:
            problems.append(f"{where}.evidence: no evidence has the ids {unknown[:5]}")
    if problems:
        raise InvalidReport("; ".join(problems))
    return submitted


def merge(rules: Report, submitted: SubmittedReport, runs: list[ToolRun], llm: LlmRun) -> Report:
    report = rules.model_copy(deep=True)
    by_cause = {finding.cause_id: finding for finding in rules.hypotheses}
    ours = [_finding(h, by_cause.get(h.cause_id)) for h in submitted.hypotheses]
    chosen = {finding.cause_id for finding in ours}
    kept = [finding for finding in rules.hypotheses if finding.cause_id not in chosen]
    report.hypotheses = ours + kept
    if kept:
        report.notes.append(
            "The model left out rules hypotheses, kept after its own: "
            + ", ".join(f"{f.cause_id} ({round(f.confidence * 100)}%)" for f in kept)
        )
    added = add_runs(report, runs)
    if added:
        report.rank_groups = group_ranks(EvidenceSet(report.evidence))
    report.next_steps = submitted.next_steps + [
        step for step in rules.next_steps if step not in submitted.next_steps
    ]
    report.llm = llm.model_copy(update={"outcome": "report", "explanation": submitted.explanation})
    return report


def _finding(hypothesis: SubmittedHypothesis, rule: Finding | None) -> Finding:
    cited = list(dict.fromkeys(hypothesis.evidence + (rule.evidence if rule else [])))
    return Finding(
        rule_id=rule.rule_id if rule else LLM_RULE_ID,
        cause_id=hypothesis.cause_id,
        title=hypothesis.title or (rule.title if rule else CAUSES[hypothesis.cause_id]),
        summary=hypothesis.summary,
        ranks=hypothesis.ranks or (rule.ranks if rule else []),
        location=hypothesis.location or (rule.location if rule else None),
        other_locations=rule.other_locations if rule else [],
        confidence=hypothesis.confidence,
        evidence=cited,
        fix=hypothesis.fix or (rule.fix if rule else ""),
        confirm=hypothesis.confirm or (rule.confirm if rule else ""),
    )


def add_runs(report: Report, runs: list[ToolRun]) -> list[Evidence]:
    """Tool runs into the report (results, gaps, evidence by id); the items that were new."""
    known = {item.id for item in report.evidence}
    added: list[Evidence] = []
    for run in runs:
        report.tool_runs.append(run.result)
        report.gaps += run.gaps
        for item in run.evidence:
            if item.id not in known:
                known.add(item.id)
                added.append(item)
    report.evidence += added
    return added
