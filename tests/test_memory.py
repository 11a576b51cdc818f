"""Memory evidence: the restricted unpickler, the OOM signatures, and read_memory on dumps."""

from __future__ import annotations

import copyreg
import importlib.util
import json
import os
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import requires_torch
from triage.readers import signatures
from triage.readers.safe_pickle import UntrustedPickleError, load_untrusted
from triage.readers.signatures import parse_size
from triage.registry import REGISTRY, ToolRun

FIXTURES = Path(__file__).parent / "fixtures" / "memory"
GiB, MiB = 2**30, 2**20


# --- the restricted unpickler ------------------------------------------------------------


class _Shell:
    """Unpickling this would run a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


class _Eval:
    """Unpickling this would evaluate Python code."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, (self.code,))


def _touch(marker: Path) -> str:
    return f"__import__('pathlib').Path({str(marker)!r}).touch()"


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_os_system_is_refused_by_name_and_never_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps({"segments": [_Shell(f"touch {marker}")]}, protocol=protocol)
    with pytest.raises(UntrustedPickleError) as caught:
        load_untrusted(data)
    assert caught.value.refused == f"{os.system.__module__}.system"
    assert "refused global" in str(caught.value)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_builtins_eval_is_refused_and_never_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps([_Eval(_touch(marker))], protocol=protocol))
    with pytest.raises(UntrustedPickleError, match="builtins.eval"):
        load_untrusted(path)
    assert not marker.exists()


def test_inst_and_extension_opcodes_go_through_the_same_refusal(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    inst = b"(S'touch " + str(marker).encode() + b"'\nios\nsystem\n."  # protocol 0 INST
    with pytest.raises(UntrustedPickleError) as caught:
        load_untrusted(inst)
    assert caught.value.refused == "os.system"
    copyreg.add_extension("os", "system", 0x7FFF_FFF0)
    try:
        ext4 = b"\x80\x02\x84\xf0\xff\xff\x7fX\x04\x00\x00\x00true\x85R."  # EXT4, TUPLE1, REDUCE
        with pytest.raises(UntrustedPickleError, match="os.system"):
            load_untrusted(ext4)
    finally:
        copyreg.remove_extension("os", "system", 0x7FFF_FFF0)
    assert not marker.exists()


def test_plain_data_and_allowed_constructors_load() -> None:
    snapshot = {
        "segments": [{"device": 0, "total_size": 2 * MiB, "segment_pool_id": (0, 0)}],
        "meta": OrderedDict(a=1),
        "tags": {1, 2},
        "frozen": frozenset({3}),
    }
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert load_untrusted(pickle.dumps(snapshot, protocol=protocol)) == snapshot
    # torch's C++ pickler tags typed lists with torch.jit._pickle helpers: identities here
    tagged = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\n]q\x00(K\x01K\x02e\x85R."
    assert load_untrusted(tagged) == [1, 2]


def test_persistent_ids_sizes_and_corrupt_streams_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UntrustedPickleError, match="persistent id"):
        load_untrusted(b"\x80\x02X\x01\x00\x00\x00xQ.")  # BINPERSID: a torch.save storage
    with pytest.raises(UntrustedPickleError, match="limit"):
        load_untrusted(pickle.dumps(list(range(1000))), max_bytes=100)
    big = tmp_path / "big.pickle"
    big.write_bytes(pickle.dumps(b"x" * 5000))
    with pytest.raises(UntrustedPickleError, match="limit"):
        load_untrusted(big, max_bytes=1000)
    with pytest.raises(UntrustedPickleError, match="corrupt"):
        load_untrusted(pickle.dumps({"segments": list(range(100))})[:-7])


def test_a_real_flight_recorder_dump_loads() -> None:
    dump = load_untrusted(FIXTURES / "other" / "fr_gloo_rank0.pickle")
    assert dump["version"] and dump["entries"][0]["profiling_name"] == "gloo:all_reduce"


# --- OOM signatures ----------------------------------------------------------------------


def _fields(line: str, name: str) -> dict[str, Any]:
    found = {sig.name: fields for sig, fields in signatures.matches(line)}
    assert name in found, f"{name} did not match: {sorted(found)}"
    return found[name]


def s(text: str) -> int:
    size = parse_size(text)
    assert size is not None
    return size


# Messages as users reported them (issue trackers), one per allocator format.
LEGACY = (
    "RuntimeError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 11.17 GiB total "
    "capacity; 10.85 GiB already allocated; 24.81 MiB free; 10.86 GiB reserved in total by PyTorch)"
)
TORCH_1_0 = (
    "RuntimeError: CUDA out of memory. Tried to allocate 16.00 GiB (GPU 0; 11.93 GiB total "
    "capacity; 4.00 GiB already allocated; 7.33 GiB free; 179.00 KiB cached)"
)
TYPO_2_1 = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a "
    "total capacty of 6.00 GiB of which 0 bytes is free. Of the allocated memory 2.93 GiB is "
    "allocated by PyTorch, and 2.30 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)
PROCESSES = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 572.00 MiB. GPU 0 "
    "has a total capacity of 39.49 GiB of which 321.31 MiB is free. Process 3721648 has 414.00 "
    "MiB memory in use. Including non-PyTorch memory, this process has 37.46 GiB memory in use. "
    "Process 1374765 has 414.00 MiB memory in use. Process 1374763 has 414.00 MiB memory in use. "
    "Process 1374764 has 414.00 MiB memory in use. Of the allocated memory 36.04 GiB is "
    "allocated by PyTorch, and 321.37 MiB is reserved by PyTorch but unallocated. If reserved "
    "but unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def test_legacy_message_numbers() -> None:
    fields = _fields(LEGACY, "memory.cuda_oom")
    assert fields["format"] == "legacy"
    assert fields["requested"] == 128 * MiB and fields["device"] == 0
    assert fields["capacity"] == s("11.17 GiB") and fields["free"] == s("24.81 MiB")
    assert fields["allocated"] == s("10.85 GiB") and fields["reserved"] == s("10.86 GiB")
    assert fields["unallocated"] == s("10.86 GiB") - s("10.85 GiB")


def test_a_message_cut_short_keeps_the_numbers_it_has() -> None:
    fields = _fields(LEGACY[: LEGACY.index("24.81 MiB") + 6], "memory.cuda_oom")
    assert fields["capacity"] == s("11.17 GiB") and fields["allocated"] == s("10.85 GiB")
    assert "free" not in fields and "reserved" not in fields


def test_torch_1_0_cached_is_reserved_but_unallocated() -> None:
    fields = _fields(TORCH_1_0, "memory.cuda_oom")
    assert fields["unallocated"] == 179 * 1024
    assert fields["reserved"] == 4 * GiB + 179 * 1024
    assert fields["requested"] == 16 * GiB > fields["capacity"]


def test_torch_2_1_typo_and_derived_reserved() -> None:
    fields = _fields(TYPO_2_1, "memory.cuda_oom")
    assert fields["format"] == "2.x" and fields["free"] == 0
    assert fields["capacity"] == 6 * GiB
    assert fields["reserved"] == s("2.93 GiB") + s("2.30 GiB")
    assert _fields(TYPO_2_1, "memory.oom_exception")["exception"] == "torch.cuda.OutOfMemoryError"


def test_every_process_on_the_gpu_is_read() -> None:
    fields = _fields(PROCESSES, "memory.cuda_oom")
    assert fields["this_process"] == s("37.46 GiB")
    assert [p["pid"] for p in fields["processes"]] == [3721648, 1374765, 1374763, 1374764]
    assert {p["used"] for p in fields["processes"]} == {414 * MiB}


def test_a_request_too_large_to_print_keeps_no_number() -> None:
    fields = _fields(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.",
        "memory.cuda_oom",
    )
    assert "requested" not in fields


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("RuntimeError: CUDA error: out of memory", "memory.cuda_error_oom"),
        (  # vLLM's sleep-mode allocator waking a colocated engine
            "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
            "memory.cuda_error_oom",
        ),
        (
            "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:66",
            "memory.cuda_error_oom",
        ),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "memory.library_alloc_failed",
        ),
        (
            "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
            "memory.nccl_cuda_oom",
        ),
        (
            "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'",
            "memory.nccl_cuda_oom",
        ),
        (
            "RuntimeError: DataLoader worker (pid 9833) is killed by signal: Killed. ",
            "memory.dataloader_killed",
        ),
        (
            "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=36358.batch. Some of your "
            "processes may have been killed by the cgroup out-of-memory handler.",
            "memory.slurm_oom_kill",
        ),
        (
            "[Tue Mar  5 10:00:01 2024] Out of memory: Killed process 41234 (python) "
            "total-vm:98765432kB, anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:1000 "
            "pgtables:123456kB oom_score_adj:0",
            "memory.oom_killer",
        ),
        (
            "Memory cgroup out of memory: Killed process 5151 (pt_main_thread) total-vm:1kB, "
            "anon-rss:2kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0",
            "memory.oom_killer",
        ),
        (
            "[  123.456789] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
            "mems_allowed=0-1,oom_memcg=/slurm/uid_1000/job_123,task_memcg=/slurm/uid_1000/"
            "job_123/step_0,task=python,pid=12345,uid=1000",
            "memory.oom_kill_record",
        ),
        ("terminate called after throwing an instance of 'std::bad_alloc'", "memory.bad_alloc"),
        ("MemoryError", "memory.host_memory_error"),
        (
            "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 7.45 GiB for an array "
            "with shape (1000000000,) and data type float64",
            "memory.host_memory_error",
        ),
        (
            "RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: "
            "can't allocate memory: you tried to allocate 3481600000 bytes. Error code 12 "
            "(Cannot allocate memory)",
            "memory.cpu_allocator",
        ),
        ("OSError: [Errno 12] Cannot allocate memory", "memory.enomem"),
        (
            "./train.sh: line 9: 123456 Killed                  python train.py",
            "memory.shell_killed",
        ),
    ],
)
def test_gpu_and_host_oom_lines(line: str, name: str) -> None:
    _fields(line, name)


def test_near_misses_do_not_match() -> None:
    assert "memory.host_memory_error" not in {sig.name for sig, _ in signatures.matches(TYPO_2_1)}
    assert "memory.host_memory_error" not in {
        sig.name for sig, _ in signatures.matches("    except MemoryError:")
    }
    ib = "node1:2345:2400 [0] NCCL WARN NET/IB : ibv_reg_mr failed: Cannot allocate memory"
    assert "memory.enomem" not in {sig.name for sig, _ in signatures.matches(ib)}
    bus = "DataLoader worker (pid 7) is killed by signal: Bus error. "
    fields = _fields(bus, "memory.dataloader_killed")
    assert fields["signal"] == "Bus error"  # matched; the host rule counts only "Killed"


def test_oom_killer_fields_are_numbers() -> None:
    fields = _fields(
        "Out of memory: Killed process 41234 (python) total-vm:10kB, anon-rss:2048kB, "
        "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:1kB oom_score_adj:0",
        "memory.oom_killer",
    )
    assert fields["victim_pid"] == 41234 and fields["anon_rss"] == 2048 * 1024


# --- read_memory -------------------------------------------------------------------------


def read(pickles: list[Path] | None = None, documents: list[Path] | None = None) -> ToolRun:
    run = REGISTRY.run(
        "read_memory",
        {
            "pickle_files": [str(p) for p in pickles or []],
            "json_files": [str(p) for p in documents or []],
        },
    )
    assert run.result.status != "error", run.result.error
    return run


def dumps(run: ToolRun) -> list[dict[str, Any]]:
    return [e.data for e in run.evidence if e.kind == "memory_dump"]


def test_fragmented_snapshot() -> None:
    run = read([FIXTURES / "fragmented" / "snapshot.pickle"])
    (dump,) = dumps(run)
    assert dump["format"] == "snapshot" and dump["device"] == 0
    assert dump["reserved"] == 12 * GiB and dump["allocated"] == 6 * GiB
    assert dump["largest_free_block"] == 512 * MiB and dump["inactive_split"] == 6 * GiB
    assert dump["oom_requested"] == 2 * GiB and dump["oom_device_free"] == 300 * MiB
    site = dump["top_sites"][0]
    assert (site["frame"]["file"], site["frame"]["line"]) == ("/work/model.py", 88)
    assert site["bytes"] == 6 * GiB and site["count"] == 12
    assert dump["expandable_segments"] is False
    assert not run.gaps


def test_memory_stats_dump_and_its_nested_form(tmp_path: Path) -> None:
    run = read(documents=[FIXTURES / "fragmented" / "memory_stats.json"])
    (flat,) = dumps(run)
    assert flat["format"] == "memory_stats"
    assert flat["allocated"] == 9 * GiB and flat["reserved"] == 15 * GiB
    assert flat["inactive_split"] == 6 * GiB
    assert flat["num_alloc_retries"] == 14 and flat["num_ooms"] == 1
    nested: dict[str, Any] = {}
    for key, value in json.loads(
        (FIXTURES / "fragmented" / "memory_stats.json").read_text()
    ).items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / "nested.json"
    path.write_text(json.dumps(nested))
    (again,) = dumps(read(documents=[path]))
    assert {k: again[k] for k in ("allocated", "reserved", "inactive_split")} == {
        k: flat[k] for k in ("allocated", "reserved", "inactive_split")
    }


def test_growth_across_snapshots_names_the_growing_line() -> None:
    folder = FIXTURES / "leak"
    run = read(sorted(folder.glob("*.pickle"), reverse=True))  # order comes from the names
    (growth,) = [e.data for e in run.evidence if e.kind == "memory_growth"]
    assert [p["allocated"] for p in growth["points"]] == [7 * GiB, 8 * GiB, 9 * GiB]
    assert growth["growth"] == 2 * GiB and growth["monotonic"] is True
    site = growth["growing_sites"][0]
    assert (site["frame"]["line"], site["bytes"]) == (63, 2 * GiB)


def test_memory_stats_per_step_is_a_series(tmp_path: Path) -> None:
    run = read(documents=[FIXTURES / "leak" / "memory_stats_steps.json"])
    (growth,) = [e.data for e in run.evidence if e.kind == "memory_growth"]
    assert [p["label"].split()[-1] for p in growth["points"]] == ["100", "200", "300", "400"]
    assert growth["growth"] == 3 * GiB
    lines = tmp_path / "steps.jsonl"
    rows = json.loads((FIXTURES / "leak" / "memory_stats_steps.json").read_text())
    lines.write_text("\n".join(json.dumps(r) for r in rows))
    assert len(dumps(read(documents=[lines]))) == 4


def test_trace_floor_rise_and_unfreed_site() -> None:
    (dump,) = dumps(read([FIXTURES / "leak_trace" / "snapshot.pickle"]))
    assert dump["trace_growth"] >= GiB
    site = dump["unfreed_sites"][0]
    assert (site["frame"]["file"], site["frame"]["line"]) == ("/work/train.py", 63)


def test_other_dumps_are_skipped_silently() -> None:
    run = REGISTRY.run(
        "read_memory",
        {
            "pickle_files": [str(FIXTURES / "other" / "fr_gloo_rank0.pickle")],
            "json_files": [str(FIXTURES / "other" / "config.json")],
        },
    )
    assert run.result.status == "no_data"
    assert not run.evidence and not run.gaps


def test_refused_and_corrupt_pickles_are_gaps_not_exceptions(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "rank0_snapshot.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [_Shell(f"touch {marker}")]}))
    corrupt = tmp_path / "rank1_snapshot.pickle"
    corrupt.write_bytes((FIXTURES / "capacity" / "snapshot.pickle").read_bytes()[:-40])
    good = FIXTURES / "capacity" / "snapshot.pickle"
    run = read([evil, corrupt, good])
    reasons = {Path(g.source).name: g.reason for g in run.gaps}
    assert "refused global" in reasons["rank0_snapshot.pickle"]
    assert "system" in reasons["rank0_snapshot.pickle"]
    assert "corrupt" in reasons["rank1_snapshot.pickle"]
    assert len(dumps(run)) == 1  # the good one is still read
    assert not marker.exists()


def test_a_cut_off_memory_stats_json_is_a_gap(tmp_path: Path) -> None:
    cut = tmp_path / "memory_stats.json"
    cut.write_text((FIXTURES / "fragmented" / "memory_stats.json").read_text()[:500])
    run = REGISTRY.run("read_memory", {"json_files": [str(cut)]})
    assert run.result.status == "no_data"
    assert "corrupt JSON" in run.gaps[0].reason


def test_a_snapshot_saved_as_json_is_read(tmp_path: Path) -> None:
    snapshot = load_untrusted(FIXTURES / "fragmented" / "snapshot.pickle")
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    (dump,) = dumps(read(documents=[path]))
    assert dump["largest_free_block"] == 512 * MiB and dump["oom_requested"] == 2 * GiB


def test_ranks_come_from_file_names() -> None:
    run = read(sorted((FIXTURES / "same_device").glob("*.pickle")))
    assert sorted((d["rank"], d["device"]) for d in dumps(run)) == [(1, 0), (2, 0)]


def test_no_files_is_an_error_result() -> None:
    run = REGISTRY.run("read_memory", {})
    assert run.result.status == "error" and "no pickle or JSON" in (run.result.error or "")


def test_fixtures_are_what_the_script_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _load("make_fixtures", FIXTURES / "make_fixtures.py")
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.main()
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    kept = sorted(
        p.relative_to(FIXTURES)
        for p in FIXTURES.rglob("*")
        if p.suffix in (".pickle", ".json") and p.name != "fr_gloo_rank0.pickle"
    )
    assert written == kept
    assert all((tmp_path / p).read_bytes() == (FIXTURES / p).read_bytes() for p in written)


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@requires_torch
def test_torchs_memory_viz_reads_the_fixtures() -> None:
    """torch's own snapshot reader, loaded by path: it needs no CUDA and no torch import."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    viz = _load("memory_viz", Path(spec.submodule_search_locations[0]) / "cuda" / "_memory_viz.py")
    for name in ("fragmented", "capacity", "collective", "leak_trace"):
        data = load_untrusted(FIXTURES / name / "snapshot.pickle")
        assert "Summary of segments" in viz.segsum(data)
        if name != "leak_trace":
            assert "raise OutOfMemoryError" in viz.trace(data)
