"""Memory inside the size caps: a document small enough to be read must not build more
objects than its size allows. Each crafted file below took gigabytes and minutes before
(a 20 MB pickle of 20 million empty dicts: 1.8 GB and 96 s as a Flight Recorder dump; a
20 MB probe snapshot of 2.3 million invalid records: killed at 19 GB); each is now one
gap, read in a fresh process whose peak RSS is measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_hostile_fuzz import PRINT_PEAK_MB
from triage.readers.object_bounds import (
    PICKLE_CONTAINER_OPCODES,
    TooManyObjects,
    allowed_containers,
    check_json,
    check_pickle,
)

FIXTURES = Path(__file__).parent / "fixtures"
MAX_RSS_MB = 450
DICTS = 20_000_000

RUN_TOOL = f"""
import json, sys
from triage.cli.common import load
from triage.registry import REGISTRY
load()
run = REGISTRY.run(sys.argv[1], json.loads(sys.argv[2]))
print(json.dumps([gap.reason for gap in run.gaps] + [run.result.error or ""]))
{PRINT_PEAK_MB}
"""


def run_tool(tool: str, params: dict[str, object]) -> tuple[list[str], int]:
    """The tool's gap reasons and the peak RSS in MB of the process that ran it."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_TOOL, tool, json.dumps(params)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    reasons, rss = done.stdout.strip().splitlines()[-2:]
    return json.loads(reasons), int(rss)


def dict_pickle(keys: dict[str, bytes]) -> bytes:
    """A protocol-2 pickle of a dict whose last key holds a list of DICTS empty dicts:
    one byte per dict."""
    items = b"".join(
        b"X" + len(k).to_bytes(4, "little") + k.encode() + value for k, value in keys.items()
    )
    return b"\x80\x02}(" + items + b"](" + b"}" * DICTS + b"eu."


def text(value: str) -> bytes:
    return b"X" + len(value).to_bytes(4, "little") + value.encode()


def test_a_pickle_of_millions_of_empty_dicts_is_no_flight_recorder_dump(tmp_path: Path) -> None:
    data = dict_pickle({"version": text("2.4"), "pg_config": b"}", "entries": b""})
    (tmp_path / "rank0.pickle").write_bytes(data)
    reasons, rss = run_tool("read_flight_recorder", {"flight_recorder_dir": str(tmp_path)})
    assert any("containers" in r and "not loaded" in r for r in reasons), reasons
    assert rss < MAX_RSS_MB


def test_a_pickle_of_millions_of_empty_dicts_is_no_memory_snapshot(tmp_path: Path) -> None:
    data = dict_pickle({"segments": b""})
    (tmp_path / "snapshot.pickle").write_bytes(data)
    reasons, rss = run_tool("read_memory", {"pickle_files": [str(tmp_path / "snapshot.pickle")]})
    assert any("containers" in r and "not loaded" in r for r in reasons), reasons
    assert rss < MAX_RSS_MB


def probe_file(folder: Path, records: str, count: int, **head: object) -> Path:
    fields = {"format": "triage.probe/1", "rank": 0, "pid": 1, "time": 0, "call": 0, **head}
    opening = json.dumps(fields)[:-1]
    path = folder / "triage-probe-rank0-call0000-pid1.json"
    path.write_text(opening + ', "tensors": [' + ",".join([records] * count) + "]}")
    return path


@pytest.mark.parametrize(
    "records,count,head,expected",
    [
        ("{}", 6_300_000, {}, "containers"),  # 19 MB, a record per 3 bytes
        ('{"a": 1}', 2_300_000, {"host": "h"}, "Field required at tensors.0.name"),
    ],
)
def test_a_probe_snapshot_of_millions_of_bad_records_is_one_gap(
    tmp_path: Path, records: str, count: int, head: dict[str, object], expected: str
) -> None:
    probe_file(tmp_path, records, count, **head)
    reasons, rss = run_tool("read_probe_snapshots", {"snapshot_files": [str(tmp_path)]})
    assert any(expected in r for r in reasons), reasons
    assert rss < MAX_RSS_MB


def test_a_json_flight_recorder_dump_over_its_cap_is_not_parsed(tmp_path: Path) -> None:
    from triage.readers.flight_recorder.dump_files import MAX_JSON_DUMP_BYTES

    entry = json.dumps({"record_id": 0, "collective_seq_id": 1, "profiling_name": "x" * 4000})
    count = MAX_JSON_DUMP_BYTES // len(entry) + 1
    body = ", ".join([entry] * count)
    (tmp_path / "rank0.json").write_text(
        '{"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": [' + body + "]}"
    )
    reasons, rss = run_tool("read_flight_recorder", {"flight_recorder_dir": str(tmp_path)})
    assert any("limit for JSON dumps" in r for r in reasons), reasons
    assert rss < MAX_RSS_MB


def every_fixture() -> list[Path]:
    return sorted(
        p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".pickle", ".json")
    )


@pytest.mark.parametrize("path", every_fixture(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_real_documents_are_within_their_allowance(path: Path) -> None:
    data = path.read_bytes()
    if data[:1] == b"\x80":
        check_pickle(data)
    else:
        check_json(data)


def test_a_document_at_its_allowance_passes_and_one_more_is_refused() -> None:
    size = 64 << 20
    allowed = allowed_containers(size)
    exact = b"[" * allowed + b" " * (size - allowed)
    check_json(exact)
    with pytest.raises(TooManyObjects):
        check_json(b"[" + exact[:-1])
    with pytest.raises(TooManyObjects):
        check_pickle(PICKLE_CONTAINER_OPCODES * (allowed // len(PICKLE_CONTAINER_OPCODES) + 1))


def test_a_small_document_may_hold_a_floor_of_containers() -> None:
    check_json("[" * 100_000 + "]" * 100_000)  # deep nesting is the parser's to refuse
    assert allowed_containers(10) == allowed_containers(1 << 20) == 1 << 20
