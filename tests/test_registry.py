"""The registry turns every tool failure into a result, never an exception."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from triage.models import Evidence, ToolStatus
from triage.registry import Registry, ToolError, ToolOutput


def make_registry() -> Registry:
    registry = Registry()

    def echo(count: int, label: str = "x") -> ToolOutput:
        """Echo evidence."""
        return ToolOutput(
            evidence=[
                Evidence(id=f"e{i}", kind="k", source="s", summary=label) for i in range(count)
            ]
        )

    def refuses(path: str) -> ToolOutput:
        raise ToolError(f"{path}: refused", hint="do something else")

    def crashes() -> ToolOutput:
        raise RuntimeError("boom\nsecond line")

    registry.register(echo, "echo", "Echo evidence.")
    registry.register(refuses, "refuses", "Refuses.")
    registry.register(crashes, "crashes", "Crashes.")
    return registry


def test_ok_and_no_data() -> None:
    registry = make_registry()
    assert registry.run("echo", {"count": 2}).result.status is ToolStatus.ok
    empty = registry.run("echo", {"count": 0})
    assert empty.result.status is ToolStatus.no_data


def test_schema_comes_from_the_signature() -> None:
    schema = make_registry().get("echo").input_schema()
    assert schema["required"] == ["count"]
    assert schema["properties"]["count"]["type"] == "integer"


def test_tool_error_becomes_gap_with_hint() -> None:
    run = make_registry().run("refuses", {"path": "/x"})
    assert run.result.status is ToolStatus.error
    assert run.result.error == "/x: refused"
    assert run.gaps[0].hint == "do something else"


def test_invalid_input_and_unknown_tool_and_crash_are_one_line_errors() -> None:
    registry = make_registry()
    bad = registry.run("echo", {"count": "many"})
    assert bad.result.status is ToolStatus.error and "invalid input" in (bad.result.error or "")
    extra = registry.run("echo", {"count": 1, "nope": 2})
    assert extra.result.status is ToolStatus.error
    unknown = registry.run("nope", {})
    assert "unknown tool" in (unknown.result.error or "")
    crash = registry.run("crashes", {})
    assert crash.result.error == "internal error: RuntimeError: boom"


def test_output_is_bounded() -> None:
    run = make_registry().run("echo", {"count": 3000, "label": "y" * 20})
    assert len(run.result.output) < 5000


def test_rule_modules_are_named_by_their_rule_id() -> None:
    """`rules/<source>/<name>.py` holds rule `<source>.<name>`, so the path is the ID."""
    from triage.registry import RULES

    bundled = [r for r in RULES.values() if r.detect.__module__.startswith("triage.rules.")]
    assert len(bundled) >= 60
    for rule in bundled:
        assert rule.detect.__module__ == f"triage.rules.{rule.id}", rule.id


def test_load_rules_imports_only_the_families_asked_for() -> None:
    code = (
        "import sys\n"
        "from triage.plugins import load_rules\n"
        "load_rules({'oom'})\n"
        "from triage.registry import RULES\n"
        "assert RULES and {r.cause_id.split('.')[0] for r in RULES.values()} == {'oom'}\n"
        "assert 'triage.rules.fr.mismatched_collective' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_rule_families_of_playbook_globs() -> None:
    from triage.plugins import rule_families

    assert rule_families(["hang.*"]) == {"hang"}
    assert rule_families(["config.*", "comm.wrong_interface"]) == {"config", "comm"}
    assert rule_families(["*"]) is None


def test_tool_modules_load_when_a_tool_is_first_needed() -> None:
    code = (
        "import sys\n"
        "from triage.plugins import load_tools\n"
        "from triage.registry import REGISTRY\n"
        "load_tools()\n"
        "assert 'scan_logs' in REGISTRY and 'triage.tools.scan_logs' not in sys.modules\n"
        "REGISTRY.get('scan_logs')\n"
        "assert 'triage.tools.scan_logs' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_rule_stamps_its_ids_and_the_schema_still_requires_them() -> None:
    from triage.models import Finding
    from triage.registry import RULES, EvidenceSet, rule

    @rule("test.stamped", "hang.unknown")
    def stamped(evidence: EvidenceSet) -> Iterator[Finding]:
        """Yields one finding that names neither ID.

        What it detects:
        Nothing.

        Why it happens:
        A test.

        Evidence:
        None.

        Fix:
        None.

        Known false positives:
        All.

        References:
        None.
        """
        yield Finding(title="t", summary="s", confidence=0.1)

    try:
        [finding] = list(RULES["test.stamped"].detect(EvidenceSet([])))
        assert (finding.rule_id, finding.cause_id) == ("test.stamped", "hang.unknown")
    finally:
        RULES.pop("test.stamped")
    schema = Finding.model_json_schema(mode="serialization")
    assert {"rule_id", "cause_id"} <= set(schema["required"])
    assert "default" not in schema["properties"]["rule_id"]


def test_a_tool_being_imported_is_waited_for_not_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads (MCP calls, a model's parallel tool calls) ask for one deferred tool:
    the second waits for the first's import instead of calling the tool unknown."""
    registry = Registry()
    entered, release = threading.Event(), threading.Event()

    def slow_import(module: str) -> None:
        entered.set()
        assert release.wait(30)
        registry.register(lambda: ToolOutput(), "late_tool", "Registered by a slow import.")

    monkeypatch.setattr("triage.registry.importlib.import_module", slow_import)
    registry.defer("late_tool", "some.module")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(registry.get, "late_tool")
        assert entered.wait(30)
        second = pool.submit(registry.get, "late_tool")
        release.set()
        assert first.result(30).name == second.result(30).name == "late_tool"
