"""Horovod's coordinator refuses a collective whose ranks submitted different things under one
tensor name (horovod/common/controller.cc's messages, and the older MPI-era wording): a size
or dtype is a shape mismatch, an op, root, scale factor or device is the ranks calling
different collectives. Neither names the odd rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "horovod.common.exceptions.HorovodInternalError: Mismatched ALLREDUCE tensor shapes:"
            " One rank sent a tensor of shape [10], but another rank sent a tensor of shape [11].",
            "hang.shape_mismatch",
        ),
        (
            "Mismatched ALLGATHER tensor shapes: One rank sent a tensor with dimension 1 equal to"
            " 128, but another rank sent a tensor with dimension 1 equal to 64.",
            "hang.shape_mismatch",
        ),
        (
            "tensorflow.python.framework.errors_impl.FailedPreconditionError: Mismatched data"
            " types: One rank had type float32, but another rank had type float64.",
            "hang.shape_mismatch",
        ),
        (
            "RuntimeError: Mismatched allreduce tensor shapes: One rank reduced a tensor of shape"
            " [10], but another rank sent a tensor of shape [11].",
            "hang.shape_mismatch",
        ),
        (
            "horovod.common.exceptions.HorovodInternalError: Mismatched operations: One rank did"
            " an ALLREDUCE, but another rank did an BROADCAST.",
            "hang.mismatched_collective",
        ),
        (
            "Mismatched MPI operations: One rank did an allreduce, but another rank did an"
            " allgather.",
            "hang.mismatched_collective",
        ),
        (
            "Mismatched BROADCAST root ranks: One rank specified root rank 0, but another rank"
            " specified root rank 1.",
            "hang.mismatched_collective",
        ),
        (
            "Mismatched ALLREDUCE CPU/GPU device selection: One rank specified device GPU, but"
            " another rank specified device CPU.",
            "hang.mismatched_collective",
        ),
    ],
    ids=[
        "shapes",
        "gather-dims",
        "dtypes",
        "mpi-era-shapes",
        "ops",
        "mpi-era-ops",
        "root",
        "device",
    ],
)
def test_the_coordinators_refusal_names_what_differs(tmp_path: Path, line: str, cause: str) -> None:
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence, top.ranks) == (cause, 0.7, [])
    assert "One " in top.summary and "does not say which rank" in top.summary


def test_a_mismatch_word_elsewhere_is_not_horovods(tmp_path: Path) -> None:
    text = "ValueError: Mismatched tensor shapes in the config: see docs\n"
    causes = [h.cause_id for h in analyze_files(tmp_path, {"rank0.log": text}).hypotheses]
    assert "hang.shape_mismatch" not in causes
