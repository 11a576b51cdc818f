"""`triage chat` driven through stdin, as a script or a person at a pipe would drive it:
without a key it is a guided shell over tools and playbooks; with one (a local fake
Messages API) it keeps the conversation and lets the model call the read-only tools."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.conftest import REPO
from tests.fake_messages_api import (
    FakeMessagesApi,
    message,
    overloaded,
    serving,
    text,
    tool_use,
)
from triage.chat import ChatSession, parse_params, start
from triage.cli import app
from triage.llm.config import LlmConfig
from triage.registry import REGISTRY

OOM_LOGS = REPO / "tests" / "fixtures" / "logs" / "host_oom_kill"
PLANTED = "hf_" + "Q7wErTy8UiOp9AsDfGh0JkLzXcVbNm1234"


@pytest.fixture
def messages_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMessagesApi]:
    yield from serving(monkeypatch)


def chat(*lines: str, args: tuple[str, ...] = ()) -> Any:
    return CliRunner().invoke(app, ["chat", *args], input="\n".join(lines) + "\n")


def test_without_a_key_chat_is_a_guided_shell(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    saved = tmp_path / "incident.md"
    done = chat(
        "/tools",
        f"/run collect_files paths=[{json.dumps(str(OOM_LOGS))}]",
        "/run scan_logs",
        "/report",
        "why did rank 1 die?",
        "/playbook oom",
        "/nope",
        f"/save {saved}",
        f"/save {saved}",
        "/quit",
        "/report",  # never read: /quit ended the session
    )
    assert done.exit_code == 0, done.output
    out = done.output
    assert "No model (ANTHROPIC_API_KEY is not set)" in out
    assert "scan_logs(log_files)" in out and "dump_stacks(" in out
    assert "collect_files: no_data" in out
    assert "scan_logs: ok" in out  # its log_files came from collect_files
    assert "oom.host" in out  # the rules decided again over the new evidence
    assert "use /tools, /run, /report, /playbook, /save" in out
    assert "Playbook `oom`" in out and "unknown command /nope" in out
    assert out.count(f"saved {saved}") == 1 and "File exists" in out
    md = saved.read_text()
    assert md.startswith("# triage oom report") and "**Verdict:** `oom.host`" in md
    assert "## Transcript" in md and "- **you:** /run scan_logs" in md
    assert "- tool: `scan_logs: ok" in md and "## LLM review" not in md


def test_chat_with_a_model_keeps_the_history_and_runs_tools(
    messages_api: FakeMessagesApi, tmp_path: Path
) -> None:
    console_log = str(OOM_LOGS / "console.log")
    messages_api.script(
        message(tool_use("scan_logs", {"log_files": [console_log]})),
        message(text("Rank 1 was killed by the host OOM killer (exitcode -9).")),
        message(text("Raise the container's memory limit or use fewer dataloader workers.")),
    )
    saved = tmp_path / "chat.md"
    done = chat(
        "why did the job die?",
        f"how do I fix it? my token is HF_TOKEN={PLANTED}",
        f"/save {saved}",
        args=("--evidence", str(OOM_LOGS)),
    )
    assert done.exit_code == 0, done.output
    assert "killed by the host OOM killer" in done.output and "scan_logs: ok" in done.output
    first, second, third = messages_api.requests
    assert [t["name"] for t in first["tools"]] == [s.name for s in REGISTRY.all() if s.read_only]
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    opening = first["messages"][0]["content"][0]["text"]
    assert '<evidence source="rules report">' in opening and "oom.host" in opening
    assert opening.endswith("why did the job die?")
    assert second["messages"][-1]["content"][0]["type"] == "tool_result"
    history = third["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant", "user"]
    assert history[0]["content"][0]["text"].endswith("why did the job die?")
    assert history[3]["content"][0]["text"].startswith("Rank 1 was killed")
    assert "how do I fix it?" in history[4]["content"][0]["text"]
    assert all(PLANTED not in body for body in messages_api.bodies)
    assert "HF_TOKEN=[REDACTED]" in messages_api.bodies[2]
    md = saved.read_text()
    assert "## LLM review" in md and "3 requests" in md and "`scan_logs(" in md
    assert "- **triage:** Raise the container's memory limit" in md


def test_an_api_error_leaves_the_commands_working_and_the_history_clean(
    messages_api: FakeMessagesApi,
) -> None:
    messages_api.script(overloaded(), overloaded(), message(text("Now I can answer.")))
    done = chat("first question", "/tools", "second question", args=("--evidence", str(OOM_LOGS)))
    assert done.exit_code == 0, done.output
    assert "model unavailable: the API is overloaded (529)" in done.output
    assert "scan_logs(log_files)" in done.output and "Now I can answer." in done.output
    retried = messages_api.requests[2]["messages"]
    assert len(retried) == 1 and "first question" not in retried[0]["content"][0]["text"]


def test_the_last_step_of_a_turn_offers_no_tools(messages_api: FakeMessagesApi) -> None:
    report, playbook = start([str(OOM_LOGS)], [], [])
    out = io.StringIO()
    session = ChatSession(
        report, playbook, [], Console(file=out, width=100), LlmConfig(max_steps=2)
    )
    messages_api.script(
        message(tool_use("scan_logs", {"log_files": [str(OOM_LOGS / "console.log")]})),
        message(text("Done looking.")),
    )
    assert session.handle("look again")
    assert [r["tool_choice"] for r in messages_api.requests] == [{"type": "auto"}, {"type": "none"}]
    assert session.usage.steps == 2 and session.usage.tool_calls[0].status == "ok"
    assert "Done looking." in out.getvalue()


def test_parse_params_takes_key_values_or_one_json_object() -> None:
    assert parse_params('paths=["a b", "c"] n=3 name=x') == {
        "paths": ["a b", "c"],
        "n": 3,
        "name": "x",
    }
    assert parse_params("paths='[\"d\"]'") == {"paths": ["d"]}
    assert parse_params('{"pids": [1, 2]}') == {"pids": [1, 2]}
    for bad in ("justaword", "{not json", "[1, 2]"):
        with pytest.raises(ValueError):
            parse_params(bad)


def test_save_never_overwrites(tmp_path: Path) -> None:
    report, playbook = start([], [], [])
    out = io.StringIO()
    session = ChatSession(report, playbook, [], Console(file=out), LlmConfig())
    target = tmp_path / "kept.md"
    target.write_text("mine")
    session.handle(f"/save {target}")
    assert target.read_text() == "mine" and "cannot write" in out.getvalue()
