"""The fault matrix's CI slice (`python bench/fault_matrix.py --slice`), scored by the
benchmark's own code: real gloo jobs with one planted fault each.

Every job and way in the slice is one that triage gets fully right today (cause, culprit
ranks and, where the way can show it, the fault's line), so a regression in the hang
rules, the Flight Recorder reader or the log rules fails here; the full matrix, with the
cases triage still misses, is a benchmark, not a test.
"""

from __future__ import annotations

import pytest

from bench.fault_matrix import (
    SLICE_TIMEOUT_S,
    WAYS,
    errors,
    matrix,
    misses,
    run_all,
    select,
)
from tests.conftest import requires_torch


def test_every_fault_script_marks_its_fault_and_the_matrix_is_full() -> None:
    jobs = matrix()
    assert len(jobs) >= 150
    for job in jobs:
        assert job.lines(), f"{job.script.name} has no '# triage: {job.fault.marker}' line"
        assert job.culprit is None or 0 <= job.culprit < job.world


@pytest.mark.scenario
@requires_torch
def test_triage_names_cause_ranks_and_line_on_the_slice() -> None:
    slice_ = select(None, WAYS, slice_=True)
    assert 4 <= len(slice_) <= 8
    scores = run_all(slice_, parallel=2, timeout_s=SLICE_TIMEOUT_S, quiet=True)
    assert len(scores) == sum(len(ways) for _, ways in slice_)
    wrong = [s for s in scores if s.error or not s.all_ok]
    assert not wrong, "\n".join(misses(wrong) + errors(wrong))
