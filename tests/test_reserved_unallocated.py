"""Reserved far above allocated: the caching allocator holds memory it does not reuse.

Lines follow what loops print from torch.cuda.memory_allocated()/memory_reserved() and
DeepSpeed's see_memory_usage format string (`MA ... Max_MA ... CA ... Max_CA ...`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files, hypothesis


def test_reserved_twice_the_peak_allocated_is_fragmentation(tmp_path: Path) -> None:
    line = "[rank2]:after step 40 MA 20.5 GB         Max_MA 24.1 GB         CA 61.3 GB         Max_CA 61 GB"
    found = hypothesis(analyze_files(tmp_path, {"rank2.log": line}), "oom.fragmentation")
    assert found.confidence == 0.5 and found.ranks == [2]
    assert "expandable_segments:True" in found.fix


def test_against_the_allocation_of_the_moment_the_reading_is_weak(tmp_path: Path) -> None:
    line = "step 100 memory_allocated: 20.1 GB, memory_reserved: 45.0 GB"
    found = hypothesis(analyze_files(tmp_path, {"rank0.log": line}), "oom.fragmentation")
    assert found.confidence == 0.3


@pytest.mark.parametrize(
    "line",
    [
        # the cache holds what the step's peak needed: no fragmentation
        "after step 40 MA 20.5 GB         Max_MA 58.0 GB         CA 61.3 GB         Max_CA 61 GB",
        # a small gap is noise
        "step 100 memory_allocated: 1.1 GB, memory_reserved: 2.0 GB",
    ],
)
def test_a_cache_sized_for_its_peak_is_no_finding(tmp_path: Path, line: str) -> None:
    report = analyze_files(tmp_path, {"rank0.log": line + "\nstep 101 loss 2.1"})
    assert all(h.cause_id != "oom.fragmentation" for h in report.hypotheses)
