"""Retention by importance: decisive lines are kept wherever they sit, frequent ones become series.

A log made of NCCL's per-op COLL lines keeps its few WARN lines and its error, and per rank
and communicator how many lines, the first and last ones and so the last opCount; counts
and line numbers are those a line-by-line reading gives, whether the file is read in one
stretch or many, in this process or on a pool.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.log_shapes import Writer, coll_lines, write_dense
from triage.engine import rank as ranked
from triage.readers import log_chunks, signatures
from triage.readers.log_runs import SERIES_FIRST, SERIES_LAST, writer_of
from triage.readers.logscan import ScanResult, scan_file, scan_files
from triage.registry import REGISTRY, EvidenceSet, run_rules, select

COLL = signatures.load()["hang.nccl_coll"]
TRIAGE = [sys.executable, "-c", "from triage.entry import main; main()"]


def _coll(rank: int, comm: int, opcount: int, pid: int | None = None) -> str:
    """A COLL line as torchrun --tee prefixes it (NCCL 2.21)."""
    pid = 4100 + rank if pid is None else pid
    return (
        f"[rank{rank}]:node1:{pid}:{pid + 9} [{rank}] NCCL INFO AllReduce: opCount {opcount:x} "
        f"sendbuff 0x7f00 recvbuff 0x7f00 count 64 datatype 7 op 0 root 0 comm 0x{comm:x} "
        "[nranks=4] stream 0x5500\n"
    )


def _by_line_reading(text: str) -> dict[tuple[str, str], list[int]]:
    """(writer, comm) -> the numbers of its COLL lines, reading every line with the regex."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for number, line in enumerate(text.splitlines(), 1):
        fields = COLL.match(line)
        if fields is not None:
            out[(writer_of(line), str(fields["comm"]))].append(number)
    return out


def _interleaved(seed: int, shared: bool) -> str:
    """A console of four ranks on two communicators each, lines in random order; with
    `shared` ranks 2 and 3 print one communicator address (the counts cannot tell their
    lines apart: those runs are read line by line). WARN lines break the runs, a COLL line
    cut short comes before its whole copy, the last line has no newline."""
    rng = random.Random(seed)
    opcounts: dict[tuple[int, int], int] = defaultdict(int)
    lines = []
    for _ in range(6_000):
        rank = rng.randrange(4)
        comm = 0xB000 + rank * 16 + rng.randrange(2)
        if shared and rank >= 2 and rng.random() < 0.5:
            comm = 0xA000
        opcounts[(rank, comm)] += 1
        lines.append(_coll(rank, comm, opcounts[(rank, comm)]))
        if rng.random() < 0.002:
            lines.append(
                f"[rank{rank}]:node1:{4100 + rank}:1 [{rank}] NCCL WARN Call to posix_fallocate failed : No space left on device\n"
            )
    lines.insert(4_000, lines[4_000][:90] + "\n")  # a write cut short: the text, no parse
    return "".join(lines).rstrip("\n")


def _dense(tmp: Path) -> str:
    """The benchmark's dense shape, 2 MB: runs long enough to be taken without the DFA."""
    write_dense(tmp / "dense.log", 2 << 20)
    return (tmp / "dense.log").read_text()


SHAPES: dict[str, Callable[[Path], str]] = {
    "own-comms": lambda tmp: _interleaved(seed=5, shared=False),
    "shared-comm": lambda tmp: _interleaved(seed=5, shared=True),
    "dense": _dense,
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", [4 << 20, 64 << 10], ids=["one-stretch", "many-stretches"])
def test_series_counts_and_lines_are_those_of_a_line_by_line_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, shape: str
) -> None:
    monkeypatch.setattr(log_chunks, "CHUNK", chunk)
    text = SHAPES[shape](tmp_path)
    path = tmp_path / "console.log"
    path.write_text(text)
    result = scan_file(path)
    expected = _by_line_reading(text)
    got = {(t.writer, t.key): t for t in result.series}
    assert set(got) == set(expected)
    for key, numbers in expected.items():
        tally = got[key]
        assert tally.count == len(numbers), key
        kept = numbers[:SERIES_FIRST] + numbers[SERIES_FIRST:][-SERIES_LAST:]
        assert [s.line for s in tally.signals] == kept, key
        assert tally.latest.fields == COLL.match(text.splitlines()[numbers[-1] - 1]), key
    warnings = [s.line for s in result.signals if s.signature == "nccl.shm_failed"]
    every = [n for n, line in enumerate(text.splitlines(), 1) if "NCCL WARN" in line]
    assert warnings == every and warnings
    assert result.lines == len(text.splitlines())
    assert result.aggregated == sum(len(n) for n in expected.values())


def test_a_dense_log_keeps_its_buried_warnings_and_its_error(tmp_path: Path) -> None:
    """The benchmark's dense shape, small: every line a COLL line but three."""
    small, large = tmp_path / "small" / "rank3.log", tmp_path / "large" / "rank3.log"
    for path, size in ((small, 2 << 20), (large, 8 << 20)):
        path.parent.mkdir()
        planted = write_dense(path, size)
    run = REGISTRY.run("scan_logs", {"log_files": [str(large)]})
    warn, error = planted
    lines = {(e.data.get("signature") or e.kind, e.data.get("line")) for e in run.evidence}
    assert {("nccl.shm_failed", warn.first), ("nccl.shm_failed", warn.last)} <= lines
    assert ("traceback", error.first) in lines
    (info,) = [e.data for e in run.evidence if e.kind == "log_file"]
    series = [e.data for e in run.evidence if e.kind == "log_series"]
    assert info["aggregated"] == sum(s["count"] for s in series) == info["lines"] - 4 - 2 - 13
    assert {s["last"]["nranks"] for s in series} == {8} and len(series) == 2
    assert any("folded into 2 series" in note for note in run.notes)
    assert not run.gaps
    small_run = REGISTRY.run("scan_logs", {"log_files": [str(small)]})
    assert len(small_run.evidence) == len(run.evidence)  # four times the lines, no more evidence


def test_memory_stays_bounded_by_the_stretch_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_chunks, "CHUNK", 1 << 20)
    path = tmp_path / "rank3.log"
    write_dense(path, 12 << 20)
    tracemalloc.start()
    try:
        result = scan_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.aggregated > 50_000
    assert peak < 6 << 20, peak  # a stretch read and what it yields, not the 12 MB file


def test_a_traceback_that_crosses_a_stretch_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_chunks, "CHUNK", 64 << 10)
    writer = Writer(3)
    head = coll_lines(writer, range(30), {"world": 0, "node": 0})  # about 87 KB
    cut = head.rfind("\n", 0, (64 << 10) - 100) + 1  # the stretch ends inside it
    traceback = (
        "[rank3]:Traceback (most recent call last):\n"
        '[rank3]:  File "/workspace/train.py", line 214, in <module>\n'
        "[rank3]:    main()\n"
        '[rank3]:  File "/workspace/train.py", line 141, in train_step\n'
        "[rank3]:    dist.all_reduce(grad)\n"
        "[rank3]:RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    path = tmp_path / "rank3.log"
    path.write_text(head[:cut] + traceback + head[cut:])
    (record,) = scan_file(path).tracebacks
    assert record.exception == "RuntimeError" and record.rank == 3
    assert record.user_frame is not None and record.user_frame.line == 141
    assert record.line == head[:cut].count("\n") + 1


def _read(paths: list[Path]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for result in scan_files(paths):
        assert isinstance(result, ScanResult)
        out.append((result.lines, result.aggregated, result.noise))
        out += [(s.signature, s.line, s.rank, s.text) for s in result.signals]
        out += [(t.writer, t.key, t.count, t.latest.line) for t in result.series]
        out += [(t.line, t.exception, t.rank) for t in result.tracebacks]
    return out


def test_a_job_read_on_a_pool_reads_as_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = []
    for rank in range(3):
        paths.append(tmp_path / f"rank{rank}.log")
        write_dense(paths[-1], (1 << 20) + rank * 40_000)
    monkeypatch.setattr(log_chunks, "CHUNK", 256 << 10)
    monkeypatch.setattr(log_chunks, "_cores", lambda: 1)
    alone = _read(paths)
    monkeypatch.setattr(log_chunks, "_cores", lambda: 2)
    monkeypatch.setattr(log_chunks, "PARALLEL_BYTES", 0)
    assert _read(paths) == alone


def test_the_last_opcount_of_each_rank_names_the_one_behind(tmp_path: Path) -> None:
    """Four ranks' COLL logs of thousands of lines each (read by the run); rank 1 enqueued
    one all_reduce less than its peers, as in tests/test_hang_log_rules.py at full size."""
    paths = []
    for rank in range(4):
        ops = 5_000 - (rank == 1)
        path = tmp_path / f"rank{rank}.log"
        path.write_text("".join(_coll(rank, 0xC000 + rank, n) for n in range(ops)))
        paths.append(str(path))
    run = REGISTRY.run("scan_logs", {"log_files": paths})
    assert not [
        e for e in run.evidence if e.kind == "log_signal" and e.data["line"] not in _kept(5_000)
    ]
    found = ranked([f for _, f in run_rules(select(["hang.*"]), EvidenceSet(run.evidence))])
    assert found[0].cause_id == "hang.mismatched_collective"
    assert found[0].ranks == [1]
    assert re.search(r"AllReduce #4999\b", found[0].summary), found[0].summary


def _kept(lines: int) -> set[int]:
    """The line numbers a series of `lines` lines keeps (and one less, for the rank behind)."""
    return {*range(1, SERIES_FIRST + 1), *range(lines - SERIES_LAST - 1, lines + 1)}


def test_a_log_read_early_reads_as_read_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`triage analyze FILE` starts the pool before the CLI's imports; what it read is what
    the reader would have read, whichever way round the path is spelled, and the feeder
    hands the pool every stretch of a log of frequent lines."""
    path = tmp_path / "rank0.log"
    write_dense(path, 3 << 20)
    monkeypatch.setattr(log_chunks, "CHUNK", 128 << 10)
    monkeypatch.setattr(log_chunks, "IN_FLIGHT", 1)
    monkeypatch.setattr(log_chunks, "_one_thread", lambda: True)  # pytest may run others
    monkeypatch.setattr(log_chunks, "_cores", lambda: 2)
    monkeypatch.setattr(log_chunks, "PARALLEL_BYTES", 0)
    late = _read([path])
    monkeypatch.chdir(tmp_path)
    log_chunks.start_early(["analyze", "--format", "json", "rank0.log"])
    early = log_chunks._early
    assert early is not None
    early.feeder.join(timeout=60)
    assert len(early.pending) == len(early.work) > 2
    assert _read([path]) == late
    assert log_chunks._early is None


def test_an_early_read_of_other_files_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    write_dense(first, 1 << 20)
    write_dense(second, 1 << 20)
    monkeypatch.setattr(log_chunks, "CHUNK", 128 << 10)
    monkeypatch.setattr(log_chunks, "_one_thread", lambda: True)
    monkeypatch.setattr(log_chunks, "_cores", lambda: 2)
    monkeypatch.setattr(log_chunks, "PARALLEL_BYTES", 0)
    log_chunks.start_early(["analyze", str(first)])
    early = log_chunks._early
    assert early is not None
    assert _read([second]) == _read([second])
    assert log_chunks._early is None
    assert early.stop.is_set() and not early.feeder.is_alive()


@pytest.mark.parametrize(
    "argv", [["hang", "--pids", "1"], ["analyze"], ["analyze", "--format", "json", "-"]]
)
def test_no_pool_starts_early_without_a_log_to_read(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_chunks, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(log_chunks, "_one_thread", lambda: True)
    log_chunks.start_early(argv)
    assert log_chunks._early is None


def test_the_cli_reads_a_big_log_early_and_a_usage_error_still_exits_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rank3.log"
    write_dense(path, log_chunks.PARALLEL_BYTES + (4 << 20))
    with path.open("a") as log:
        log.write(
            "node1:4103:4112 [3] NCCL WARN Error while creating shared memory segment"
            " /dev/shm/nccl-Ab12 (size 9637888)\n"
        )
    done = subprocess.run(
        [*TRIAGE, "analyze", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hypotheses"][0]["cause_id"] == "comm.shm_exhausted"
    started = time.monotonic()
    wrong = subprocess.run(
        [*TRIAGE, "analyze", str(path), "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 2 and "No such option" in wrong.stderr
    assert time.monotonic() - started < 20
