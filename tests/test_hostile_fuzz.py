"""Every tool that reads files, on every way in (the registry, MCP, a model's tool calls
through the local Messages API), fed the same hostile inputs: a FIFO, /dev/zero, a huge
single line, deep nesting, names that are not UTF-8 or hold escape sequences, a link out of
the root, planted secrets. Each call answers within its deadline without a traceback, in
bounded memory; no planted secret reaches an output or a request, and nothing outside the
given root is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_messages_api import FakeMessagesApi, message, serving, tool_use
from tests.test_hostile_secrets import SECRETS
from tests.test_mcp import call, server  # noqa: F401  (the server fixture)
from triage.cli.common import load
from triage.llm.client import AnthropicClient
from triage.llm.config import LlmConfig
from triage.llm.loop import refine
from triage.models import Report
from triage.registry import REGISTRY, is_path_param

OUTSIDE = "OUTSIDE_THE_ROOT_MARKER"
DEADLINE_S = 30.0
MAX_RSS_MB = 1500
SECRET_LOG = (
    f"[rank0]:torch.distributed.DistBackendError: NCCL error: unhandled system error"
    f' DB_PASS={SECRETS["db_pass"]} {{"pwd": "{SECRETS["pwd"]}"}} {SECRETS["aws"]}'
    f" --db-pass {SECRETS['option']} https://u:{SECRETS['url']}@h.example token {SECRETS['hf']}"
    " \x1b]52;c;aGk=\x07\n"
)


def hostile_inputs(base: Path) -> list[str]:
    """The root folder and each hostile thing inside it (plus a device outside it)."""
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(f"[rank0]: NCCL WARN {OUTSIDE}\n")
    os.mkfifo(root / "pipe.log")
    (root / "long_line.log").write_text("A" * (16 << 20))  # no newline at all
    (root / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (root / "secrets.log").write_text(SECRET_LOG)
    (root / os.fsdecode(b"rank3_\xff.log")).write_text(SECRET_LOG)
    (root / "rank4_\x1b[31m_\x1b]0;title\x07.log").write_text(SECRET_LOG)
    (root / "link.log").symlink_to(outside / "secret.txt")
    names = ["pipe.log", "long_line.log", "deep.json", "secrets.log", "link.log"]
    return [str(root), *(str(root / n) for n in names), "/dev/zero"]


def path_calls() -> list[tuple[str, str]]:
    """(tool, input) for every path input of every registered file reader."""
    load()
    return [
        (spec.name, name)
        for spec in REGISTRY.all()
        if spec.read_only
        for name in sorted(spec.parameter_names())
        if is_path_param(name)
    ]


def leaks(text: str) -> list[str]:
    found = [name for name, secret in SECRETS.items() if secret in text]
    return found + ([OUTSIDE] if OUTSIDE in text else [])


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    return hostile_inputs(tmp_path)


def test_the_registry_answers_in_time_without_reading_outside(inputs: list[str]) -> None:
    for tool, param in path_calls():
        for path in inputs:
            started = time.monotonic()
            run = REGISTRY.run(tool, {param: [path]}, deadline_s=DEADLINE_S)
            assert time.monotonic() - started < DEADLINE_S + 5, (tool, path)
            assert "Traceback" not in (run.result.error or ""), (tool, path, run.result.error)
            said = json.dumps([e.model_dump(mode="json") for e in run.evidence], default=str)
            named = path.endswith("link.log")  # a link named directly is the caller's choice
            assert named or OUTSIDE not in said, (tool, path)


#: A child script's last line: its own peak RSS in MB. VmHWM, not ru_maxrss: Linux carries
#: ru_maxrss across exec, so a child of a pytest that imported torch reports pytest's size.
PRINT_PEAK_MB = 'print(int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) // 1024)'
SCRIPT = f"""
import json, sys
from tests.test_hostile_fuzz import path_calls
from triage.registry import REGISTRY
for tool, param in path_calls():
    for path in json.loads(sys.argv[1]):
        REGISTRY.run(tool, {{param: [path]}}, deadline_s=30.0)
{PRINT_PEAK_MB}
"""


def test_memory_stays_bounded(inputs: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(inputs)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < MAX_RSS_MB


def test_mcp_answers_leak_nothing(server: Any, inputs: list[str]) -> None:  # noqa: F811
    for tool, param in path_calls():
        for path in inputs:
            result = call(server, tool, {param: [path]})
            shown = json.dumps(
                [block.model_dump() for block in result.content] + [result.structured_content]
            )
            named = path.endswith("link.log")  # a link the client named directly is read
            assert not [x for x in leaks(shown) if not (named and x == OUTSIDE)], (tool, path)
            assert "\x1b" not in shown and "\\u001b]" not in shown, (tool, path)


@pytest.fixture
def messages_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMessagesApi]:
    yield from serving(monkeypatch)


def test_a_models_tool_calls_send_nothing_secret(
    messages_api: FakeMessagesApi, inputs: list[str]
) -> None:
    calls = [tool_use(tool, {param: [path]}) for tool, param in path_calls() for path in inputs]
    submit = tool_use("submit_report", {"hypotheses": [], "explanation": "done"})
    messages_api.script(message(*calls), message(submit))
    rules = Report(symptom="unknown", playbook="analyze", targets={"paths": [inputs[0]]})
    settings = LlmConfig(deadline_s=120.0)
    refine(rules, None, settings, AnthropicClient(settings), REGISTRY)
    assert len(messages_api.bodies) >= 2
    for body in messages_api.bodies:
        assert not leaks(body), leaks(body)
