"""LLM settings and whether an LLM can be used at all, decided without importing the SDK.

The `anthropic` SDK takes seconds to import, and `triage hang` start-up is what on-call
waits for, so nothing here imports it: the SDK is found with `find_spec`, and the
credentials the SDK will read (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN) are looked up in
the environment the same way it does.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

# The current Sonnet model: listed by the SDK (anthropic.types.ModelParam) and not in its
# deprecation table; tests/test_llm.py checks both against the installed SDK.
DEFAULT_MODEL = "claude-sonnet-5-5"
INSTALL_HINT = "pip install 'triage[llm]'"
CREDENTIAL_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


@dataclass(frozen=True)
class LlmConfig:
    """Budgets that bound one LLM pass: an outage or a chatty model costs seconds and a
    known number of tokens, never a stuck on-call shell."""

    model: str = DEFAULT_MODEL
    max_steps: int = 8
    """Requests per pass (per chat turn); the last one may only submit the report."""
    token_budget: int = 400_000
    """Input + output tokens (cached ones included) over the whole pass or chat session."""
    max_output_tokens: int = 4096
    result_chars: int = 12_000
    """Each tool result sent to the model: head and tail kept, the middle counted."""
    report_chars: int = 60_000
    """The rules' report as first shown to the model."""
    request_timeout_s: float = 60.0
    max_retries: int = 1
    deadline_s: float = 300.0
    """Wall-clock limit for a whole pass, tools included."""


def sdk_installed() -> bool:
    return importlib.util.find_spec("anthropic") is not None


def credentials_configured() -> bool:
    return any(os.environ.get(name) for name in CREDENTIAL_VARIABLES)


def unavailable_reason() -> str | None:
    """Why no LLM can be used here, as one line that says what to do; None when one can."""
    if not sdk_installed():
        return f"the anthropic SDK is not installed ({INSTALL_HINT})"
    if not credentials_configured():
        return "ANTHROPIC_API_KEY is not set"
    return None
