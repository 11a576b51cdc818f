"""The `--llm` pass: the model reviews the rules' report, may gather more evidence with
read-only tools, and ends by submitting a report of the same schema.

The rules' report is never lost. Whatever goes wrong (the API is down, overloaded or
slow, a budget runs out, the model submits nothing or an invalid report twice) the
result is the rules' report as it was, with a note saying why, and `report.llm` records
the model, the tokens used and every tool call made (the evidence those calls gathered
is merged only into an accepted report).

Budgets: at most `max_steps` requests, the last of which offers only `submit_report`
(and forces it); one more request may follow to repair an invalid report. A request is
made the last one early when the tokens already used plus the previous request's input
would pass the budget; the pass stops once the budget is spent or the deadline passed.
"""

from __future__ import annotations

import time
from typing import Any

from triage.llm import prompt
from triage.llm.client import LlmError, MessagesClient, Reply
from triage.llm.config import LlmConfig
from triage.llm.merge import (
    SUBMIT_TOOL,
    InvalidReport,
    SubmittedReport,
    merge,
    submit_tool,
    validate,
)
from triage.llm.toolbox import ToolBox, job_pids, tool_result, with_cache_breakpoint
from triage.models import LlmRun, Report
from triage.playbooks import Playbook
from triage.registry import REGISTRY, Registry

Block = dict[str, Any]
AUTO: Block = {"type": "auto"}
FORCE_SUBMIT: Block = {"type": "tool", "name": SUBMIT_TOOL}
START = (
    "Review the rules' report above against the evidence. Use the tools if more evidence "
    "could change or confirm the ranking, then call submit_report."
)
SUBMIT_NOW = "Call submit_report now with your conclusions."


def account(run: LlmRun, reply: Reply) -> None:
    usage = reply.usage
    run.steps += 1
    run.input_tokens += usage.input_tokens
    run.output_tokens += usage.output_tokens
    run.cache_creation_input_tokens += usage.cache_creation_input_tokens
    run.cache_read_input_tokens += usage.cache_read_input_tokens


def fallback(rules: Report, run: LlmRun, reason: str, client: MessagesClient | None) -> Report:
    """The rules' report as it was, with a note and the record of what the model did."""
    report = rules.model_copy(deep=True)
    report.notes.append(f"LLM pass ({run.model}) fell back to the rules' report: {reason}")
    report.notes += client.warnings if client else []
    report.llm = run.model_copy(update={"outcome": f"fallback: {reason}"})
    return report


class _Pass:
    """One pass's state: the conversation, the toolbox, the usage record."""

    def __init__(
        self,
        rules: Report,
        playbook: Playbook | None,
        config: LlmConfig,
        client: MessagesClient,
        registry: Registry,
    ) -> None:
        self.rules = rules
        self.config = config
        self.client = client
        self.toolbox = ToolBox(
            registry, config, scope=list(rules.targets.get("paths") or []), pids=job_pids(rules)
        )
        self.run = LlmRun(model=client.model, outcome="fallback: not started")
        self.system = prompt.system_blocks(prompt.REPORT_TASK, playbook)
        self.tools = with_cache_breakpoint([*self.toolbox.definitions(), submit_tool()])
        self.final_tools = with_cache_breakpoint([submit_tool()])
        self.messages: list[Block] = [
            {"role": "user", "content": prompt.opening(rules, config.report_chars, START)}
        ]

    def ask(self, last: bool) -> Reply:
        reply = self.client.create(
            system=self.system,
            tools=self.final_tools if last else self.tools,
            messages=self.messages,
            tool_choice=FORCE_SUBMIT if last else AUTO,
            max_tokens=self.config.max_output_tokens,
        )
        account(self.run, reply)
        self.messages.append({"role": "assistant", "content": reply.content})
        return reply

    def answer(self, reply: Reply, last: bool) -> tuple[SubmittedReport | None, str | None]:
        """Act on the reply's tool calls: a valid report, or why the submitted one is not."""
        known = {e.id for e in self.rules.evidence} | set(self.toolbox.evidence)
        results: list[Block] = []
        submitted, problem = None, None
        for block in reply.tool_uses():
            if block["name"] == SUBMIT_TOOL:
                try:
                    submitted = validate(block["input"], known)
                    results.append(tool_result(block, "report accepted"))
                except InvalidReport as exc:
                    problem = str(exc)
                    fix = f"invalid report: {problem}. Call submit_report again with this fixed."
                    results.append(tool_result(block, fix, is_error=True))
            elif last:
                results.append(
                    tool_result(block, "refused: only submit_report is offered now", True)
                )
            else:
                results.append(self.toolbox.execute(block)[0])
        if not results:
            results.append({"type": "text", "text": SUBMIT_NOW})
        self.messages.append({"role": "user", "content": results})
        return submitted, problem


def refine(
    rules: Report,
    playbook: Playbook | None,
    config: LlmConfig,
    client: MessagesClient,
    registry: Registry = REGISTRY,
) -> Report:
    """The rules' report reviewed by the model, or the rules' report with a note."""
    state = _Pass(rules, playbook, config, client, registry)
    run, started = state.run, time.monotonic()
    state.toolbox.deadline_at = started + config.deadline_s
    forced, repaired, last_input = False, False, 0
    try:
        for step in range(1, config.max_steps + 2):  # + 1: room for the repair round
            if run.total_tokens >= config.token_budget:
                return _stop(state, f"token budget of {config.token_budget} spent")
            if time.monotonic() - started > config.deadline_s:
                return _stop(state, f"time limit of {config.deadline_s:g} s passed")
            last = forced or step >= config.max_steps
            last = last or run.total_tokens + last_input >= config.token_budget
            reply = state.ask(last)
            usage = reply.usage
            last_input = (
                usage.input_tokens
                + usage.cache_read_input_tokens
                + usage.cache_creation_input_tokens
            )
            submitted, problem = state.answer(reply, last)
            run.tool_calls = list(state.toolbox.calls)
            if submitted is not None:
                report = merge(rules, submitted, state.toolbox.runs, run)
                report.notes += client.warnings
                return report
            if problem is not None:
                if repaired:
                    return _stop(state, f"the model's report was invalid twice: {problem}")
                repaired = forced = True
            elif last:
                return _stop(state, "the model submitted no report")
            elif not reply.tool_uses():
                forced = True
    except LlmError as exc:
        return _stop(state, f"LLM unavailable: {exc}")
    except Exception as exc:  # a bug here must not cost the rules' report
        return _stop(state, f"internal error: {type(exc).__name__}: {exc}".splitlines()[0])
    return _stop(state, f"step limit of {config.max_steps} reached without a report")


def _stop(state: _Pass, reason: str) -> Report:
    state.run.tool_calls = list(state.toolbox.calls)
    return fallback(state.rules, state.run, reason, state.client)
