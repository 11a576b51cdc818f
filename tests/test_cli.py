"""The CLI as users run it: each command, its output contract and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import triage_cli


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        triage_cli(*args), capture_output=True, text=True, timeout=60, check=False
    )


def test_tools_list_json_has_names_descriptions_schemas() -> None:
    done = run("tools", "list", "--json")
    assert done.returncode == 0
    tools = {t["name"]: t for t in json.loads(done.stdout)}
    assert {"discover_ranks", "dump_stacks"} <= set(tools)
    assert tools["dump_stacks"]["input_schema"]["required"] == ["pids"]
    assert all(t["description"] for t in tools.values())
    # every bundled tool only reads, but the one that signals ranks, which says so
    assert {n for n, t in tools.items() if t["read_only"] is not True} == {"signal_probes"}


def test_tools_run_discovers_a_live_process() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={"RANK": "1", "WORLD_SIZE": "2", "PATH": "/usr/bin:/bin"},
    )
    try:
        done = run("tools", "run", "discover_ranks", f"pids=[{proc.pid}]")
        assert done.returncode == 0, done.stderr
        payload = json.loads(done.stdout)
        assert payload["result"]["status"] == "ok"
        ranks = {e["rank"] for e in payload["evidence"]}
        assert 1 in ranks
    finally:
        proc.kill()
        proc.wait()


def test_tools_run_unknown_tool_and_bad_input_fail_cleanly() -> None:
    unknown = run("tools", "run", "nope")
    assert unknown.returncode == 2 and unknown.stderr.startswith("triage: error: unknown tool")
    bad = run("tools", "run", "dump_stacks", "pids=notalist")
    assert bad.returncode == 1 and "invalid input" in bad.stderr


def test_playbooks_and_rules_docs() -> None:
    listed = run("playbooks", "list")
    assert listed.returncode == 0
    names = {line.split()[0] for line in listed.stdout.splitlines() if line[:1].strip()}
    assert {"analyze", "hang", "comm-error", "oom", "config", "wrong-results"} <= names
    shown = run("playbooks", "show", "hang")
    assert "discover_ranks" in shown.stdout and "# Hang playbook" in shown.stdout
    missing = run("playbooks", "show", "nope")
    assert missing.returncode == 2 and "no playbook named" in missing.stderr
    rules = run("rules", "list", "--cause", "hang.*")
    assert rules.returncode == 0
    for section in ("What it detects:", "Fix:", "Known false positives:"):
        assert section in rules.stdout
    assert run("rules", "list", "--cause", "nothing.*").returncode == 2


def test_hang_markdown_report_for_a_ticket() -> None:
    # rank 0 of 2, alone: rank 1's absence is in the report
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={"RANK": "0", "WORLD_SIZE": "2", "PATH": "/usr/bin:/bin"},
    )
    try:
        done = run("hang", "--format", "markdown", "--pids", str(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert done.stdout.startswith("# triage hang report")
    assert "no live process" in done.stdout and "## Tool runs" in done.stdout


def test_hang_from_logs_alone_names_the_rank_past_the_loop() -> None:
    logs = Path(__file__).parent / "fixtures" / "logs" / "uneven_steps"
    done = run("hang", "--json", "--logs", str(logs))
    assert done.returncode == 0, done.stderr
    top = json.loads(done.stdout)["hypotheses"][0]
    assert (top["cause_id"], top["ranks"]) == ("hang.uneven_inputs", [2])


def test_the_command_exits_with_its_code_its_whole_output_and_its_exit_handlers(
    tmp_path: Path,
) -> None:
    """The console script skips the interpreter's teardown (`triage.entry.leave`): what it
    printed, its exit code, the exit handlers (here a plugin's) and the stdin scratch copy's
    removal must all survive that."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    marker = tmp_path / "exit-handler-ran"
    (plugins / "at_exit.py").write_text(
        f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).touch)\n"
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TRIAGE_PLUGINS": str(plugins), "TMPDIR": str(scratch)}
    pasted = "".join(f"step {i} loss 2.{i:02d}\n" for i in range(3_000))
    pasted += "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    done = subprocess.run(
        triage_cli("analyze", "-", "--json"),
        input=pasted,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hypotheses"][0]["cause_id"].startswith("oom.")
    assert marker.exists()
    assert not list(scratch.iterdir())
    quiet = subprocess.run(
        triage_cli("analyze", "-"),
        input="step 1 loss 2.0\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert quiet.returncode == 1 and "no failure found" in quiet.stderr
    assert run("analyze", "--no-such-option").returncode == 2
