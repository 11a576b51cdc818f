"""The one place requests leave the machine: a thin wrapper over the `anthropic` SDK.

Everything sent is redacted here, whatever the caller already did, so no code path can
forget it. SDK failures (overload, timeouts, HTTP errors, missing credentials) become
`LlmError` with a one-line reason: the caller degrades to the rules' report with a note.
The SDK is imported when a client is built, never when this module is.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Protocol

from triage.llm.config import LlmConfig
from triage.redact import redact_text, redact_value

Block = dict[str, Any]
Message = dict[str, Any]


class LlmError(Exception):
    """The model could not be asked or did not answer; the message says why, in one line."""


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass
class Reply:
    """A model turn as plain data: content blocks ready to append to the history."""

    content: list[Block]
    stop_reason: str | None
    usage: Usage

    def tool_uses(self) -> list[Block]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    def text(self) -> str:
        return "\n".join(b["text"] for b in self.content if b.get("type") == "text").strip()


class MessagesClient(Protocol):
    """What the loop and the chat need from the Messages API (tests can stand in for it)."""

    model: str
    warnings: list[str]

    def create(
        self,
        *,
        system: list[Block],
        tools: list[Block],
        messages: list[Message],
        tool_choice: Block,
        max_tokens: int,
    ) -> Reply: ...


def redact_content(content: Any) -> Any:
    """Message content with every string a person or a tool wrote redacted; the
    structure (types, ids, names) is left alone so the API still accepts it."""
    if isinstance(content, str):
        return redact_text(content)
    if isinstance(content, list):
        return [redact_content(item) for item in content]
    if not isinstance(content, dict):
        return content
    block = dict(content)
    if isinstance(block.get("text"), str):
        block["text"] = redact_text(block["text"])
    if "input" in block:
        block["input"] = redact_value(block["input"])
    if "content" in block:
        block["content"] = redact_content(block["content"])
    return block


class AnthropicClient:
    """The Messages API through the official SDK, which reads ANTHROPIC_API_KEY,
    ANTHROPIC_AUTH_TOKEN and ANTHROPIC_BASE_URL itself. Retries are few and timeouts
    explicit so an outage degrades in seconds, not the SDK's default ten minutes."""

    def __init__(self, config: LlmConfig) -> None:
        try:
            import anthropic
        except ImportError as exc:
            raise LlmError(f"the anthropic SDK cannot be imported: {exc}") from exc
        self._sdk = anthropic
        self._timeout = config.request_timeout_s
        self.model = config.model
        self.warnings: list[str] = []
        try:
            self._client = anthropic.Anthropic(
                timeout=config.request_timeout_s, max_retries=config.max_retries
            )
        except (anthropic.AnthropicError, ValueError, TypeError) as exc:
            raise LlmError(f"cannot configure the API client: {exc}") from exc

    def create(
        self,
        *,
        system: list[Block],
        tools: list[Block],
        messages: list[Message],
        tool_choice: Block,
        max_tokens: int,
    ) -> Reply:
        sdk = self._sdk
        api: Any = self._client.messages  # plain dicts stand in for the SDK's TypedDicts
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", DeprecationWarning)
                message = api.create(
                    model=self.model,
                    max_tokens=max_tokens,
                    system=redact_content(system),
                    tools=tools,
                    tool_choice=tool_choice,
                    messages=[{**m, "content": redact_content(m["content"])} for m in messages],
                )
        except sdk.APITimeoutError as exc:
            raise LlmError(f"the API did not answer within {self._timeout:g} s") from exc
        except sdk.APIConnectionError as exc:
            raise LlmError(f"cannot reach the API: {exc}") from exc
        except sdk.APIStatusError as exc:
            raise LlmError(_status_reason(exc.status_code, exc.body, str(exc))) from exc
        except sdk.AnthropicError as exc:
            raise LlmError(f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc
        for warning in caught:
            line = str(warning.message).splitlines()[0]
            if line not in self.warnings:
                self.warnings.append(line)
        return _reply(message)


def _status_reason(status: int, body: object, fallback: str) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    detail = error.get("message") if isinstance(error, dict) else None
    detail = str(detail or fallback).splitlines()[0][:200]
    if status == 529:
        return f"the API is overloaded (529): {detail}"
    if status in (401, 403):
        return f"the API refused the credentials ({status}): {detail}"
    if status == 429:
        return f"rate limited (429): {detail}"
    return f"API error {status}: {detail}"


def _reply(message: Any) -> Reply:
    content: list[Block] = []
    for block in message.content:
        if block.type == "text":
            content.append({"type": "text", "text": block.text})
        elif block.type == "tool_use":
            content.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
            )
    usage = message.usage
    return Reply(
        content=content,
        stop_reason=message.stop_reason,
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
            cache_read_input_tokens=usage.cache_read_input_tokens or 0,
        ),
    )
