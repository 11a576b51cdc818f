"""`triage analyze` on hostile and odd input: every case ends in a report, never a traceback.

Logs arrive empty, binary, cut off, in mixed encodings, as one giant line, as ten
thousand files or as millions of identical warnings. Each case runs the CLI as users
do and checks the exit code, that stdout is one JSON report and that stderr holds at
most one `triage: error:` line.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import triage_cli

# Real text, as torchelastic and NCCL print it (torch 2.x, NCCL 2.18).
ELASTIC_FAILED = (
    "E1121 20:59:54.538000 13346 torch/distributed/elastic/multiprocessing/api.py:1002] "
    "failed (exitcode: 1) local_rank: 1 (pid: 13371) of binary: /usr/bin/python3.11"
)
TRAINING = (
    "[rank1]:[2026-03-02 14:01:05,123][train][INFO] - step {n} | loss 2.3456 | lr 3.000e-04\n"
)
TQDM = "\rEpoch 0:   6%|6         | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6]"
NCCL_WARN = (
    "gpu-node-07:48213:48400 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
    "from peer 10.42.7.21<53249> with error 12, opcode 32564, len 0, vendor err 129 (Recv)\n"
)
NCCL_TRAIL = (
    "gpu-node-07:48213:48400 [3] NCCL INFO transport/net.cc:1008 -> 6\n"
    "gpu-node-07:48213:48400 [3] NCCL INFO proxy.cc:679 -> 6\n"
)
RETRY_TRACEBACK = (
    "[rank3]:Traceback (most recent call last):\n"
    '[rank3]:  File "/workspace/data.py", line 41, in fetch\n'
    "[rank3]:    return self.client.get(key)\n"
    "[rank3]:ConnectionResetError: [Errno 104] Connection reset by peer\n"
)
MAX_EVIDENCE = 100


def analyze(*paths: str, stdin: bytes | None = None) -> tuple[int, dict[str, Any], str]:
    """Run `triage analyze PATHS --json`; returns exit code, report, stderr."""
    env = {k: v for k, v in os.environ.items() if k != "TRIAGE_DEBUG"}
    done = subprocess.run(
        triage_cli("analyze", *paths, "--json"),
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
    )
    stderr = done.stderr.decode("utf-8", "replace")
    assert "Traceback (most recent call last)" not in stderr, stderr
    assert "internal error" not in stderr, stderr
    assert len(stderr.splitlines()) <= 1, stderr
    assert not stderr or stderr.startswith("triage: error: "), stderr
    report = json.loads(done.stdout.decode("utf-8"))  # strict: the report is valid UTF-8
    return done.returncode, report, stderr


def signals(report: dict[str, Any], name: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in report["evidence"]
        if e["kind"] == "log_signal" and (name is None or e["data"]["signature"] == name)
    ]


def gap_reasons(report: dict[str, Any]) -> list[str]:
    return [f"{g['source']}: {g['reason']}" for g in report["gaps"]]


@pytest.mark.parametrize("via_stdin", [False, True], ids=["file", "stdin"])
def test_empty_input_is_named_in_the_gaps(tmp_path: Path, via_stdin: bool) -> None:
    empty = tmp_path / "rank0.log"
    empty.write_bytes(b"")
    code, report, stderr = analyze("-", stdin=b"") if via_stdin else analyze(str(empty))
    assert code == 1 and stderr
    assert report["evidence"] == []
    source = "<stdin>" if via_stdin else str(empty)
    assert any(g["source"] == source and "empty" in g["reason"] for g in report["gaps"]), (
        gap_reasons(report)
    )


def test_binary_file_is_skipped_with_a_gap(tmp_path: Path) -> None:
    blob = bytearray(random.Random(0).randbytes(1 << 20))
    blob[100:4100] = bytes(4000)  # a run of NULs, as in a core file or a preallocated log
    path = tmp_path / "core.rank2"
    path.write_bytes(bytes(blob))
    code, report, _ = analyze(str(path))
    assert code == 1
    assert any("binary" in g["reason"] and g["source"] == str(path) for g in report["gaps"])


def test_no_newline_at_all(tmp_path: Path) -> None:
    path = tmp_path / "launcher.log"
    path.write_text(ELASTIC_FAILED)
    code, report, _ = analyze(str(path))
    assert code == 0
    [found] = signals(report, "elastic.worker_failed")
    assert found["data"]["line"] == 1 and found["data"]["fields"]["exitcode"] == 1


@pytest.mark.parametrize(
    ("progress_mb", "newline"),
    [(1, True), (20, True), (20, False)],
    ids=["1MB-line", "20MB-line", "20MB-no-newline"],
)
def test_failure_after_a_long_progress_bar_line(
    tmp_path: Path, progress_mb: int, newline: bool
) -> None:
    """tqdm redraws with \\r and never ends its line: the failure lands on the same line."""
    repeats = (progress_mb << 20) // len(TQDM)
    path = tmp_path / "train.log"
    path.write_text(
        TRAINING.format(n=1) + TQDM * repeats + ELASTIC_FAILED + ("\n" if newline else "")
    )
    assert path.stat().st_size >= progress_mb << 20
    code, report, _ = analyze(str(path))
    assert code == 0, gap_reasons(report)
    [found] = signals(report, "elastic.worker_failed")
    assert found["data"]["line"] == 2
    assert len(found["excerpt"]) <= 4096


def test_truncated_mid_traceback_and_mid_line(tmp_path: Path) -> None:
    path = tmp_path / "rank1.log"
    path.write_text(
        "".join(TRAINING.format(n=n) for n in range(1000))
        + "[rank1]:Traceback (most recent call last):\n"
        + '[rank1]:  File "/workspace/train.py", line 214, in <module>\n'
        + "[rank1]:    main()\n"
        + '[rank1]:  File "/workspace/train.py", line 188, in main\n'
        + "[rank1]:    loss.backward()\n"
        + '[rank1]:  File "/usr/local/lib/python3.11/site-packages/torch/_ten'
    )
    code, report, _ = analyze(str(path))
    assert code == 0
    [tb] = [e for e in report["evidence"] if e["kind"] == "traceback"]
    assert tb["rank"] == 1 and tb["data"]["line"] == 1001
    assert tb["data"]["user_frame"] == {
        "function": "main",
        "file": "/workspace/train.py",
        "line": 188,
    }


def test_invalid_utf8_mixed_into_a_valid_log(tmp_path: Path) -> None:
    path = tmp_path / "worker.log"
    path.write_bytes(
        TRAINING.format(n=1).encode()
        + b"[rank1]:step 2 \xff\xfe loss \xc3\x28 caf\xc3\xa9 \xe2\x82\n"
        + "[rank1]:données \u2713 ".encode()
        + b"\x80\x81"
        + ELASTIC_FAILED.encode()
        + b"\n"
    )
    code, report, _ = analyze(str(path))
    assert code == 0
    [found] = signals(report, "elastic.worker_failed")
    assert found["rank"] == 1 and found["data"]["line"] == 3
    assert "données" in found["excerpt"]


def test_directory_of_ten_thousand_files(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for rank in range(10_000):
        (logs / f"rank{rank}.log").write_text(TRAINING.format(n=rank))
    (logs / "rank4242.log").write_text(TRAINING.format(n=1) + ELASTIC_FAILED + "\n")
    code, report, _ = analyze(str(logs))
    assert code == 0, gap_reasons(report)
    [found] = signals(report, "elastic.worker_failed")
    assert found["source"] == f"{logs / 'rank4242.log'}:2"
    assert found["rank"] == 4242
    assert not any("files" in g["reason"] and "only" in g["reason"] for g in report["gaps"])


def test_log_without_a_known_signature_says_what_to_collect(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    path.write_text("".join(TRAINING.format(n=n) for n in range(5000)))
    code, report, stderr = analyze(str(path))
    assert code == 1  # like grep: nothing found is not success
    assert stderr.startswith("triage: error: no failure found in what was read: ")
    # Only the file's own record (where it ends), read as weak readings of text without a
    # failure (its last numbers may be wrong, or the job stopped there): reported, and still
    # no failure found.
    assert [e["kind"] for e in report["evidence"]] == ["log_file"]
    assert report["evidence"][0]["excerpt"] == TRAINING.format(n=4999).strip()
    assert [(h["rule_id"], h["confidence"]) for h in report["hypotheses"]] == [
        ("logs.metrics_only", 0.12),
        ("logs.log_stops", 0.1),
    ]
    assert any("no known failure signature" in g["reason"] for g in report["gaps"])
    assert any("NCCL_DEBUG=INFO" in step for step in report["next_steps"]), report["next_steps"]
    assert sum("every rank's log" in step for step in report["next_steps"]) == 1


def test_missing_path_is_one_clear_line(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such.log"
    done = subprocess.run(
        triage_cli("analyze", str(missing), "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"triage: error: analyze: no such file or folder: {missing}\n"


def test_stdin(tmp_path: Path) -> None:
    pasted = (
        "[rank0]:Traceback (most recent call last):\n"
        '[rank0]:  File "/workspace/train.py", line 97, in all_reduce_grads\n'
        "[rank0]:    dist.all_reduce(flat)\n"
        "[rank0]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
        "Connection closed by peer [10.42.7.21]:14004\n" + ELASTIC_FAILED + "\n"
    )
    code, report, _ = analyze("-", stdin=pasted.encode())
    assert code == 0
    assert report["targets"]["paths"] == ["-"]
    [tb] = [e for e in report["evidence"] if e["kind"] == "traceback"]
    assert tb["source"] == "<stdin>:1" and tb["rank"] == 0
    assert signals(report, "elastic.worker_failed")[0]["source"] == "<stdin>:5"
    assert "triage-stdin-" not in json.dumps(report)  # the scratch copy never shows


@pytest.mark.parametrize(
    ("block", "times"),
    [(NCCL_WARN + NCCL_TRAIL, 25_000), (RETRY_TRACEBACK, 6_000)],
    ids=["nccl-warn-lines", "repeated-traceback"],
)
def test_evidence_stays_bounded_past_the_scan_window(
    tmp_path: Path, block: str, times: int
) -> None:
    """Past the scanner's window (20,000 kept lines) more hits must not mean more evidence.

    Millions of lines take the same path (2M NCCL WARN lines, 150 MB: 16 evidence items,
    108 MB peak); just past the window keeps the test fast.
    """
    path = tmp_path / "rank3.log"
    path.write_text(block * times)
    code, report, _ = analyze(str(path))
    assert code == 0, gap_reasons(report)
    items = [e for e in report["evidence"] if e["kind"] in ("log_signal", "traceback")]
    assert items, "nothing recognised in the repeated lines"
    assert len(report["evidence"]) <= MAX_EVIDENCE, len(report["evidence"])
    assert any("not kept" in g["reason"] for g in report["gaps"]), gap_reasons(report)
