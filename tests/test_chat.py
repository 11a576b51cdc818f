"""`triage chat` driven through stdin, as a script or a person at a pipe would drive it:
without a key it is a guided shell over tools and playbooks; with one (a local fake
Messages API) it keeps the conversation and lets the model call the read-only tools."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.conftest import REPO, triage_cli
from tests.fake_messages_api import (
    FakeMessagesApi,
    message,
    overloaded,
    serving,
    text,
    tool_use,
)
from triage.chat import ChatSession, start
from triage.chat_inputs import parse_params
from triage.chat_lines import history_path, save_history
from triage.cli import app
from triage.engine import job_targets
from triage.llm.config import LlmConfig
from triage.models import Report
from triage.playbooks import load_playbooks
from triage.registry import REGISTRY, Registry, ToolOutput

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


def test_run_fills_a_tools_inputs_from_the_sessions_evidence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    done = chat(
        "/run scan_logs",
        "/run dump_stacks",
        "/run scan_logs log_files=/nonexistent.log",
        args=("--evidence", str(OOM_LOGS)),
    )
    assert done.exit_code == 0, done.output
    out = done.output
    assert "scan_logs: ok, " in out and "Field required" not in out
    assert (
        "/run: dump_stacks needs pids and the session has none; "
        "give it: /run dump_stacks pids=PIDS\n" in out
    )
    assert "gap: /nonexistent.log: cannot read" in out  # what was typed wins, one value a list


def read_dumps(dump_files: list[str], pids: list[int], label: str = "") -> ToolOutput:
    """A plugin tool chat knows nothing about: its schema alone says what it needs."""
    return ToolOutput(text=json.dumps({"dump_files": dump_files, "pids": pids, "label": label}))


def plugin_session(tmp_path: Path, pids: list[int]) -> tuple[ChatSession, io.StringIO]:
    (tmp_path / "sub").mkdir()
    for name in ("a.bin", "sub/b.bin"):
        (tmp_path / name).write_text("dump")
    registry = Registry()
    registry.register(read_dumps, "read_dumps", "Read dumps.")
    report = Report(
        symptom="unknown", playbook="analyze", targets=job_targets([str(tmp_path)], pids)
    )
    out = io.StringIO()
    console = Console(file=out, width=400)
    session = ChatSession(report, load_playbooks()["analyze"], [], console, LlmConfig(), registry)
    return session, out


def test_run_fills_any_tools_inputs_from_its_schema(tmp_path: Path) -> None:
    session, out = plugin_session(tmp_path, [41, 42])
    session.handle("/run read_dumps")
    session.handle("/run read_dumps pids=7 label='one dump'")
    first, second = [json.loads(line) for line in out.getvalue().splitlines() if "{" in line]
    files = [str(tmp_path / "a.bin"), str(tmp_path / "sub" / "b.bin")]
    assert first == {"dump_files": files, "pids": [41, 42], "label": ""}
    assert second == {"dump_files": files, "pids": [7], "label": "one dump"}


def test_a_required_input_the_session_lacks_is_named_in_one_line(tmp_path: Path) -> None:
    session, out = plugin_session(tmp_path, [])
    session.handle("/run read_dumps")
    assert out.getvalue() == (
        "/run: read_dumps needs pids and the session has none; give it: /run read_dumps pids=PIDS\n"
    )


def test_the_saved_transcript_has_every_question_answer_and_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    saved = tmp_path / "ticket.md"
    done = chat(
        "why did rank 1 die?",
        "/run scan_logs",
        "/run dump_stacks",
        "/nope",
        f"/save {saved}",
        args=("--evidence", str(OOM_LOGS)),
    )
    assert done.exit_code == 0, done.output
    transcript = saved.read_text().split("## Transcript\n", 1)[1]
    assert transcript.splitlines()[1:3] == [
        "- **you:** why did rank 1 die?",
        "- **triage:** No model (ANTHROPIC_API_KEY is not set); "
        "use /tools, /run, /report, /playbook, /save.",
    ]
    assert re.search(r"- tool: `scan_logs: ok, .*`\n\n  ```text\n  1 files?: ", transcript)
    assert "- **triage:** /run: dump_stacks needs pids" in transcript
    assert "- **triage:** unknown command /nope" in transcript
    page = saved.with_suffix(".html").read_text()  # the same, as one page for the ticket
    assert "<h2>Transcript</h2>" in page and "why did rank 1 die?" in page


def test_tab_completes_commands_tool_names_and_inputs() -> None:
    report, playbook = start([], [], [])
    session = ChatSession(report, playbook, [], Console(file=io.StringIO()), LlmConfig())
    assert session.complete("", "/ru") == ["/run "]
    assert session.complete("", "/q") == ["/quit "]
    assert session.complete("/run ", "scan") == ["scan_logs "]
    assert session.complete("/run dump_stacks ", "p") == ["pids="]
    assert session.complete("/run nosuchtool ", "") == []
    assert session.complete("/playbook ", "oo") == ["oom "]


class Terminal:
    """A child on a pseudo-terminal, as a person's shell runs it; its output is polled
    until what is expected arrives or a deadline passes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.fd, child = pty.openpty()
        self.proc = subprocess.Popen(
            args, stdin=child, stdout=child, stderr=child, env=env, cwd=REPO
        )
        os.close(child)
        self.output = ""

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def expect(self, text: str, count: int = 1, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while self.output.count(text) < count:
            assert self.read(deadline), f"no {text!r} x{count} in {self.output[-3000:]!r}"

    def finish(self, timeout_s: float = 30) -> int:
        """Read to the end (a full terminal would block the child) and wait for it."""
        deadline = time.monotonic() + timeout_s
        while self.read(deadline):
            pass
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 1))

    def read(self, deadline: float) -> bool:
        """One chunk of output; False at the end of it or at the deadline."""
        ready, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            return False
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child has closed the terminal
            return False
        self.output += chunk.decode(errors="replace")
        return bool(chunk)


@contextlib.contextmanager
def terminal(state: Path) -> Iterator[Terminal]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env |= {"XDG_STATE_HOME": str(state), "TERM": "xterm", "INPUTRC": "/dev/null"}
    term = Terminal(triage_cli("chat"), env)
    try:
        yield term
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
        term.proc.wait()
        os.close(term.fd)


def test_at_a_terminal_keys_edit_recall_and_complete_and_history_is_kept(
    tmp_path: Path,
) -> None:
    with terminal(tmp_path) as term:
        term.expect("triage> ")
        term.send("/to\t\r")  # Tab completes /tools
        term.expect("scan_logs(log_files)")
        term.expect("triage> ", count=2)
        term.send("\x1b[A\r")  # up arrow: the last line again
        term.expect("scan_logs(log_files)", count=2)
        term.send("/quit\r")
        assert term.finish() == 0, term.output
    assert "^[[A" not in term.output and "unknown command" not in term.output
    history = tmp_path / "triage" / "chat_history"
    assert "/tools" in history.read_text() and "/quit" in history.read_text()
    assert stat.S_IMODE(history.stat().st_mode) == 0o600


def test_a_history_file_that_cannot_be_used_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "triage" / "chat_history").mkdir(parents=True)  # neither readable nor writable
    with terminal(tmp_path) as term:
        term.expect("triage> ")
        term.send("/to\t\r")  # line editing works all the same
        term.expect("scan_logs(log_files)")
        term.send("/quit\r")
        assert term.finish() == 0, term.output
    assert "Traceback" not in term.output and "IsADirectory" not in term.output


def test_history_is_saved_with_secrets_masked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    readline = pytest.importorskip("readline")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    target = history_path()
    assert target == tmp_path / "triage" / "chat_history"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    assert history_path() == Path.home() / ".local" / "state" / "triage" / "chat_history"
    readline.clear_history()
    readline.add_history(f"how do I fix it? my token is HF_TOKEN={PLANTED}")
    try:
        save_history(readline, target)
    finally:
        readline.clear_history()
    saved = target.read_text()
    assert PLANTED not in saved and "HF_TOKEN=[REDACTED]" in saved
