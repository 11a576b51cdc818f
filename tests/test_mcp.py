"""`triage mcp`: the real server driven by the real MCP client, in-process and over stdio.

The logs are a real failing torchrun job (tests/fixtures/logs/peer_crash: rank 1 raises,
ranks 0 and 2 lose their gloo connection), so the answers checked here are the ones
tests/test_analyze_fixtures.py expects from `triage analyze`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
import mcp.types as types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.server import Server  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from tests.conftest import REPO, triage_cli  # noqa: E402
from triage.cli import app  # noqa: E402
from triage.mcp_server import REPORT_TOOL, build_server  # noqa: E402
from triage.models import Report  # noqa: E402
from triage.registry import REGISTRY  # noqa: E402

JOB = REPO / "tests" / "fixtures" / "logs" / "peer_crash"
EXPECTED = json.loads((JOB / "expected.json").read_text())
# What the job left behind; expected.json is the test's answer, not evidence.
JOB_PATHS = [str(p) for p in sorted(JOB.iterdir()) if p.name != "expected.json"]
STDIO_DEADLINE_S = 120


@pytest.fixture(scope="module")
def server() -> Server[Any]:
    return build_server()


def session(server: Server[Any], body: Callable[[Client], Awaitable[Any]]) -> Any:
    """Run `body` against the server through an in-process MCP client."""

    async def main() -> Any:
        async with Client(server) as client:
            return await body(client)

    return anyio.run(main)


def call(server: Server[Any], name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    result: types.CallToolResult = session(server, lambda client: client.call_tool(name, arguments))
    return result


def text(result: types.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, types.TextContent)
    return block.text


# --- in-process ------------------------------------------------------------------------------


def test_lists_every_read_only_tool_with_its_registry_schema_and_triage_report(
    server: Server[Any],
) -> None:
    listing = session(server, lambda client: client.list_tools())
    tools = {tool.name: tool for tool in listing.tools}
    registry = {spec.name: spec for spec in REGISTRY.all() if spec.read_only}
    assert set(tools) == set(registry) | {REPORT_TOOL}
    for name, spec in registry.items():
        assert tools[name].input_schema == spec.input_schema(), name
        assert tools[name].description == spec.description, name
        assert tools[name].annotations is not None and tools[name].annotations.read_only_hint
    report_tool = tools[REPORT_TOOL]
    assert report_tool.output_schema == Report.model_json_schema(mode="serialization")
    assert set(report_tool.input_schema["properties"]) == {
        "symptom",
        "paths",
        "pids",
        "launcher_pid",
        "flight_recorder",
    }


def test_collect_files_feeds_scan_logs_which_finds_the_failing_rank(server: Server[Any]) -> None:
    collected = call(server, "collect_files", {"paths": [str(JOB)]})
    assert not collected.is_error, text(collected)
    log_files = collected.structured_content["context"]["log_files"]
    assert str(JOB / "console.log") in log_files
    assert sum(path.endswith("stderr.log") for path in log_files) == 3
    assert "log_files" in text(collected)  # clients that show text only see the inputs too

    scanned = call(server, "scan_logs", {"log_files": log_files})
    assert not scanned.is_error, text(scanned)
    output = scanned.structured_content
    assert output["result"]["status"] == "ok"
    assert output["result"]["evidence_ids"] == [e["id"] for e in output["evidence"]]
    raised = [
        e
        for e in output["evidence"]
        if e["kind"] == "traceback" and e["summary"].startswith("ValueError")
    ]
    assert raised and {e["rank"] for e in raised} >= {1}
    peers = {
        e["rank"]
        for e in output["evidence"]
        if e["id"].startswith("log:") and "gloo.connection_closed" in e["summary"]
    }
    assert {0, 2} <= peers
    assert text(scanned).startswith(output["result"]["output"].splitlines()[0])


def test_triage_report_is_the_report_triage_analyze_gives(server: Server[Any]) -> None:
    result = call(server, REPORT_TOOL, {"paths": JOB_PATHS})
    assert not result.is_error, text(result)
    report = Report.model_validate(result.structured_content)
    top = report.hypotheses[0]
    assert top.cause_id in {EXPECTED["cause"], *EXPECTED["accept"]}
    assert sorted(top.ranks) == EXPECTED["culprit_ranks"]
    assert text(result).startswith(f"{top.cause_id} (")
    assert "Ranks: 1" in text(result)

    cli = CliRunner().invoke(app, ["analyze", *JOB_PATHS, "--json"])
    assert cli.exit_code == 0, cli.output
    from_cli = Report.model_validate_json(cli.stdout)
    assert [h.model_dump() for h in report.hypotheses] == [
        h.model_dump() for h in from_cli.hypotheses
    ]
    assert [e.id for e in report.evidence] == [e.id for e in from_cli.evidence]


def test_triage_report_with_a_fixed_symptom_runs_that_playbook(server: Server[Any]) -> None:
    result = call(server, REPORT_TOOL, {"symptom": "comm", "paths": JOB_PATHS})
    assert not result.is_error, text(result)
    report = Report.model_validate(result.structured_content)
    assert report.playbook == "comm-error"
    assert all(h.cause_id.startswith("comm.") for h in report.hypotheses)
    assert report.hypotheses[0].cause_id == "comm.peer_failure"


def test_triage_report_reads_live_ranks_by_pid(server: Server[Any]) -> None:
    rank = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={"RANK": "1", "WORLD_SIZE": "2", "PATH": "/usr/bin:/bin"},
    )
    try:
        result = call(server, REPORT_TOOL, {"symptom": "config", "pids": [rank.pid]})
    finally:
        rank.kill()
        rank.wait()
    assert not result.is_error, text(result)
    report = Report.model_validate(result.structured_content)
    assert report.targets["pids"] == [rank.pid]
    assert {run.tool for run in report.tool_runs} >= {"discover_ranks", "check_environment"}
    assert any(e.kind == "process" and e.rank == 1 for e in report.evidence)


def test_failures_are_tool_errors_with_their_reason_and_the_server_lives_on(
    server: Server[Any], tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such.log")
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("no_such_tool", {}, "unknown tool 'no_such_tool'"),
        ("scan_logs", {"log_files": 5}, "invalid input: log_files"),
        ("scan_logs", {"log_files": [], "extra": 1}, "invalid input: extra"),
        ("collect_files", {}, "invalid input: paths: Field required"),
        ("collect_files", {"paths": []}, "no files to read"),
        (REPORT_TOOL, {"symptom": "slow", "paths": JOB_PATHS}, "invalid input: symptom"),
        (REPORT_TOOL, {}, "give the job's evidence"),
        (REPORT_TOOL, {"paths": [missing]}, f"no evidence: {missing}: no such file"),
    ]

    async def body(client: Client) -> list[types.CallToolResult]:
        results = [await client.call_tool(name, args) for name, args, _ in cases]
        unreadable = await client.call_tool("scan_logs", {"log_files": [missing]})
        return [*results, unreadable]

    *results, unreadable = session(server, body)
    for (name, _, reason), result in zip(cases, results, strict=True):
        assert result.is_error, (name, reason)
        assert text(result).startswith(reason), (text(result), reason)
        assert "\n" not in text(result) and "Traceback" not in text(result)
    # A file that cannot be read is a gap of a finished run, not a failed call.
    assert not unreadable.is_error
    gaps = unreadable.structured_content["gaps"]
    assert any(g["source"] == missing and g["reason"].startswith("cannot read") for g in gaps)
    assert f"Gap: {missing}: cannot read" in text(unreadable)


def test_secrets_in_logs_are_masked_before_they_reach_the_client(
    server: Server[Any], tmp_path: Path
) -> None:
    secret = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
    (tmp_path / "rank0.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 12, in <module>\n'
        '[rank0]:     login(token=os.environ["HF_TOKEN"])\n'
        f"[rank0]: ValueError: Invalid token passed: {secret}\n"
    )
    log = str(tmp_path / "rank0.log")
    scanned = call(server, "scan_logs", {"log_files": [log]})
    report = call(server, REPORT_TOOL, {"paths": [log]})
    for result in (scanned, report):
        assert not result.is_error, text(result)
        shown = text(result) + json.dumps(result.structured_content)
        assert secret not in shown
    assert "[REDACTED]" in json.dumps(scanned.structured_content["evidence"])
    Report.model_validate(report.structured_content)


# --- over stdio ------------------------------------------------------------------------------

PLUGIN = '''
import logging
import sys
import warnings

from triage.models import Evidence
from triage.registry import ToolOutput, tool

print("plugin import printed this", flush=True)


@tool(name="noisy_probe")
def noisy_probe(word: str) -> ToolOutput:
    """Echo a word, printing, warning and logging on the way."""
    print(f"noisy_probe printed {word}")
    sys.stdout.flush()
    warnings.warn("noisy_probe warned")
    logging.getLogger("noisy").warning("noisy_probe logged")
    return ToolOutput(evidence=[Evidence(id="echo", kind="echo", source="test", summary=word)])


@tool(name="poke_rank", read_only=False)
def poke_rank(pid: int) -> ToolOutput:
    """Acts on the job: never offered to a model."""
    raise AssertionError("called over MCP")
'''


def test_over_stdio_stdout_carries_only_the_protocol(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "noisy.py").write_text(PLUGIN)
    stderr_path = tmp_path / "stderr.txt"
    command = triage_cli("--plugins", str(plugins), "mcp")
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=REPO)
    unparsed: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):  # a stdout line that is not a JSON-RPC message
            unparsed.append(message)

    async def main() -> tuple[
        types.ListToolsResult, types.CallToolResult, types.CallToolResult, types.CallToolResult
    ]:
        with stderr_path.open("w") as errlog, anyio.fail_after(STDIO_DEADLINE_S):
            # The client closes stdin, then terminates the server's process tree, however
            # this block ends: no server outlives the test.
            transport = stdio_client(params, errlog=errlog)
            async with Client(transport, message_handler=on_message) as client:
                listing = await client.list_tools()
                noisy = await client.call_tool("noisy_probe", {"word": "hello"})
                poke = await client.call_tool("poke_rank", {"pid": 1})
                report = await client.call_tool(REPORT_TOOL, {"paths": JOB_PATHS})
                return listing, noisy, poke, report

    listing, noisy, poke, report = anyio.run(main)
    assert unparsed == []
    names = {tool.name for tool in listing.tools}
    assert {"noisy_probe", "scan_logs", REPORT_TOOL} <= names
    assert "poke_rank" not in names
    assert not noisy.is_error and noisy.structured_content["evidence"][0]["summary"] == "hello"
    assert poke.is_error and text(poke).startswith("unknown tool 'poke_rank'")
    assert not report.is_error, text(report)
    top = Report.model_validate(report.structured_content).hypotheses[0]
    assert top.cause_id in {EXPECTED["cause"], *EXPECTED["accept"]}
    stderr = stderr_path.read_text()
    for line in (
        "plugin import printed this",
        "noisy_probe printed hello",
        "noisy_probe warned",
        "noisy_probe logged",
    ):
        assert line in stderr, stderr


def test_without_the_extra_mcp_says_how_to_install_it() -> None:
    blocked = (
        "import sys; sys.modules['mcp'] = None; sys.argv = ['triage', 'mcp'];"
        " from triage.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "triage: error: `triage mcp` needs the MCP SDK: pip install 'triage[mcp]'"
    ]


def test_other_commands_never_import_the_mcp_sdk() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "triage", "analyze", str(JOB / "console.log"), "--json"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "triage.engine" in imported
    assert not {m for m in imported if m.split(".")[0] in ("mcp", "mcp_types")}


def test_triage_report_takes_one_pid_or_a_string_of_pids() -> None:
    from triage.mcp_server import ReportRequest

    assert ReportRequest(pids=1234).pids == [1234]  # type: ignore[arg-type]
    assert ReportRequest(pids="1234, 1235").pids == [1234, 1235]  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be process ids"):
        ReportRequest(pids="rank0")  # type: ignore[arg-type]
