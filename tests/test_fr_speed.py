"""Flight Recorder reading at scale: the shortcuts that make it fast keep its answers.

A thousand ranks are read in one process or several with the same result, in the same
order; a busy machine reads in one process; the cycle collector is paused only while
dumps are read; the fast paths for one-tensor ops, file names and whole-file views answer
as the general code does. Nothing here is timed (bench/fr_scale.py measures speed).
"""

from __future__ import annotations

import gc
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.synthetic_fr import FAULT_LINE, plant, write_dumps
from triage.readers import flight_recorder as fr
from triage.readers.flight_recorder import dump_entries, dump_files
from triage.registry import REGISTRY


def _written(tmp_path: Path, ranks: int, culprit: int) -> list[str]:
    job, calls, _ = plant("rank_not_in_collective", ranks, 200, culprit)
    return [str(p) for p in write_dumps(tmp_path, job, calls)]


def _state(dump: fr.RankDump) -> Any:
    """Everything alignment reads of a dump, in a form that compares by value."""
    groups = {
        key: (t.last, t.first_pending, list(t.recent), t.window, t.p2p_pending, t.status)
        for key, t in dump.groups.items()
    }
    return (dump.path, dump.rank, dump.configs, groups, dump.blocked, dump.last, dump.entries)


def test_a_thousand_ranks_name_the_culprit_alike_in_one_process_or_several(
    tmp_path: Path,
) -> None:
    paths = _written(tmp_path, 1024, culprit=341)
    serial, parallel = fr.read_files(paths), fr.read_all(paths, workers=2)
    assert [_state(d) for d in parallel.dumps] == [_state(d) for d in serial.dumps]
    point = fr.analyze_dumps(serial.dumps).stuck[0]
    assert [s.ranks for s in point.sides if s.state == "idle"] == [[341]]
    run = REGISTRY.run("read_flight_recorder", {"flight_recorder_dir": str(tmp_path)})
    overview = next(e for e in run.evidence if e.kind == "fr_overview")
    assert overview.data["files"] == sorted(paths)[:5]  # the folder's order, whoever read it
    outlier = next(e for e in run.evidence if e.kind == "fr_outlier")
    assert outlier.rank == 341
    assert outlier.data["side"]["op"]["location"]["line"] == FAULT_LINE


@pytest.mark.parametrize(
    "cores,load,idle",
    [(2, 2.1, 1), (2, 0.2, 2), (2, 7.0, 1), (16, 0.0, dump_files.MAX_WORKERS), (16, 12.4, 4)],
)
def test_only_idle_cores_read(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float, idle: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert dump_files.idle_cores() == idle


def test_a_busy_machine_reads_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pool(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a worker started on a busy machine")

    paths = _written(tmp_path, fr.PARALLEL_FILES, culprit=5)
    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", no_pool)
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert len(fr.read_all(paths).dumps) == len(paths)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_waits_only_while_dumps_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    paths = _written(tmp_path, 4, culprit=1)
    seen = []
    read = dump_files.read_dump

    def watched(path: str) -> fr.RankDump:
        seen.append(gc.isenabled())
        return read(path)

    monkeypatch.setattr(dump_files, "read_dump", watched)
    was = gc.isenabled()
    try:
        _collector(enabled)
        assert len(fr.read_files([*paths, str(tmp_path / "gone")]).dumps) == 4
        assert gc.isenabled() is enabled
    finally:
        _collector(was)
    assert seen == [False] * 5


def _collector(enabled: bool) -> None:
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_entries_come_back_from_a_worker_whole(tmp_path: Path) -> None:
    dumps = fr.read_files(_written(tmp_path, 4, culprit=1)).dumps
    back = pickle.loads(pickle.dumps(dumps))
    assert [_state(d) for d in back] == [_state(d) for d in dumps]
    assert all(e.frame and e.frames_read for d in back for e in d.all_entries())


def _sizes_as_before(value: Any) -> Any:
    if type(value) is not list:
        return ()
    out = []
    for dims in value[:64]:
        if type(dims) is list:
            shape = tuple(dims[:16])
            if all(type(d) is int for d in shape):
                out.append(shape)
                continue
        out.append(())
    return tuple(out)


def _strings_as_before(value: Any) -> Any:
    if type(value) is list and all(type(v) is str for v in value[:64]):
        return tuple(value[:64])
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value[:64]) if isinstance(value, list) else ()


ODD_VALUES = [
    [[1024, 1024]],
    [[True, 1]],
    [[1.0, 2]],
    [[]],
    [[1] * 40],
    [(1, 2)],
    [None],
    [["Float"]],
    [[1, 2], [3]],
    [[1, 2], "x"],
    ["Float"],
    ["Float", "Half"],
    [1],
    [],
    "Float",
    None,
    {"a": 1},
    ["a", 1],
    list(range(70)),
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_one_tensor_shortcuts_read_every_value_as_before(value: Any) -> None:
    assert dump_entries._sizes(value) == _sizes_as_before(value)
    assert dump_entries._strings(value) == _strings_as_before(value)


@pytest.mark.parametrize(
    "name,op,peer",
    [
        ("nccl:all_reduce", "all_reduce", None),
        ("nccl:send 0->1", "send", 1),
        ("nccl:recv 3<-?", "recv", None),
        ("gloo:barrier extra", "barrier", None),
        ("nccl:", "unknown", None),
        (None, "unknown", None),
        (7, "7", None),
    ],
)
def test_profiling_names_parse_the_same_the_second_time(
    name: Any, op: str, peer: int | None
) -> None:
    raw = {"profiling_name": name, "collective_seq_id": 3, "p2p_seq_id": 3, "record_id": 1}
    first, again = dump_entries._entry(raw), dump_entries._entry(dict(raw))
    assert first is not None and again is not None
    assert (first.op, first.peer) == (again.op, again.peer) == (op, peer)


@pytest.mark.parametrize(
    "path", ["a/b/rank_3", "rank_3", "a//b/rank_3", "a/b/", "a/b/.", "a/b/..", "/", "", "."]
)
def test_file_names_are_what_pathlib_gives(path: str) -> None:
    assert dump_entries.file_name(path) == Path(path).name


def test_a_dump_read_whole_answers_like_bytes(tmp_path: Path) -> None:
    data = Path(_written(tmp_path, 4, culprit=1)[0]).read_bytes()
    view = fr._Bytes(None, data, len(data))
    cuts = [0, 1, 5000, len(data) // 2, len(data) - 1, len(data), len(data) + 10]
    for sub in (b"}(h", b"Float", b"absent!"):
        for start in cuts:
            for end in [*cuts, None]:
                assert view.find(sub, start, end) == data.find(sub, start, end)
                assert view.rfind(sub, start, end) == data.rfind(sub, start, end)
                assert view[start:end] == data[start:end]
                if end is not None:
                    assert view.count(sub, start, end) == data.count(sub, start, end)
