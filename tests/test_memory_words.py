"""Memory running out in words beyond the caching allocator's own message, as reports paste
them (tests/fixtures/memory_words.json, each with its issue or source): DeepSpeed's cache
flushes, the inference engines' KV-cache budgets, a memory_summary() table, an OOM's numbers
on a line of their own, other accelerators, the schedulers' and the kernel's limits, pinned
host memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "memory_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("ds_cache_flushes", "oom.fragmentation", 0.35),
        ("ds_cache_flushes_old", "oom.fragmentation", 0.35),
        ("vllm_kv_needed", "oom.capacity", 0.6),
        ("sglang_profiled_negative", "oom.capacity", 0.6),
        ("sglang_no_space", "oom.capacity", 0.6),
        ("vllm_sampler_warmup", "oom.capacity", 0.6),
        ("trtllm_malloc_async", "oom.capacity", 0.35),
        ("memory_summary_oom", "oom.fragmentation", 0.45),
        ("npu_ray", "oom.capacity", 0.75),
        ("mps_allocated", "oom.capacity", 0.35),
        ("slurm_touched", "oom.host", 0.4),
        ("lsf_memlimit", "oom.host", 0.85),
        ("oom_killer_invoked", "oom.host", 0.85),
        ("nccl_host_alloc", "oom.host", 0.5),
        ("numbers_alone", "oom.other_process", 0.65),
    ],
)
def test_the_memory_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"train.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


def test_a_summary_table_without_an_oom_is_no_failure(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"train.log": PASTES["memory_summary_healthy"]["text"]})
    assert report.hypotheses == []


def test_a_request_the_gpu_had_room_for_is_neither_fragmentation_nor_a_full_gpu(
    tmp_path: Path,
) -> None:
    """2 MiB refused with 203 GiB free: the numbers rule out the working set and the cache."""
    report = analyze_files(tmp_path, {"train.log": PASTES["rocm_ample_free"]["text"]})
    assert all(h.cause_id != "oom.fragmentation" for h in report.hypotheses)
    top = report.hypotheses[0]
    assert top.confidence < 0.3
    assert "203.49 GiB free" in top.summary
