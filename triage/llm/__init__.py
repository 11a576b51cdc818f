"""The optional LLM layer: `--llm` on the diagnosis commands, and `triage chat`.

Rules first, LLM second: a pass starts from the rules' report and may only return a
report of the same schema, validated, or the rules' report with a note. Importing this
package is cheap; the `anthropic` SDK (the `llm` extra) is imported only when a model is
really asked.

Without the extra or without ANTHROPIC_API_KEY, `--llm` still prints the rules' report,
with a note saying why the model was skipped, and exits as it would without `--llm`
(0 when evidence was gathered): the rules' answer is useful on its own, and a pipeline
that adds `--llm` must not start failing where no key is configured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `triage.cli` imports this package at start-up: keep it light
    from triage.models import Report
    from triage.playbooks import Playbook

from triage.llm.config import DEFAULT_MODEL

__all__ = ["DEFAULT_MODEL", "refine_report"]


def refine_report(
    report: Report,
    playbook: Playbook | None,
    model: str | None = None,
    warn: Callable[[str], None] = lambda message: None,
) -> Report:
    """Run the LLM pass over a rules' report; `warn` hears, in one line, why it fell back."""
    from triage.llm.config import LlmConfig, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        note = f"--llm skipped: {reason}; this is the rules' report"
        report.notes.append(note)
        warn(note)
        return report
    from triage.llm.client import AnthropicClient, LlmError
    from triage.llm.loop import fallback, refine
    from triage.models import LlmRun

    config = LlmConfig(model=model or DEFAULT_MODEL)
    try:
        client = AnthropicClient(config)
    except LlmError as exc:
        refined = fallback(report, LlmRun(model=config.model, outcome=""), str(exc), None)
    else:
        refined = refine(report, playbook, config, client)
    if refined.llm is not None and refined.llm.outcome != "report":
        warn(f"--llm {refined.llm.outcome}; this is the rules' report")
    return refined
