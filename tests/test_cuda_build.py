"""A CUDA stack that does not fit the GPU or the driver reads as comm.version_mismatch, in
CUDA's, torch's and the loader's own words (from torch's c10/cuda and Context sources and
the CUDA runtime's error strings; no GPU here to record them on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "confidence", "words"),
    [
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            0.75,
            "no kernels for this GPU",
        ),
        (
            "UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible"
            " with the current PyTorch installation.",
            0.75,
            "no kernels for this GPU",
        ),
        (
            "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported"
            " toolchain.",
            0.8,
            "driver does not fit",
        ),
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda"
            " functions before calling NumCudaDevices() that might have already set an error?"
            " Error 803: system has unsupported display driver / cuda driver combination",
            0.8,
            "driver does not fit",
        ),
        (
            "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 9, 2)"
            " but found runtime version (8, 5, 0).",
            0.8,
            "differs from the one torch was built against",
        ),
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Failed to initialize NVML:"
            " Driver/library version mismatch",
            0.85,
            "kernel module and the user-space driver differ",
        ),
        (
            "OSError: libcudart.so.12: cannot open shared object file: No such file or directory",
            0.6,
            "cannot find libcudart.so.12",
        ),
    ],
)
def test_a_cuda_build_that_does_not_fit(
    tmp_path: Path, line: str, confidence: float, words: str
) -> None:
    text = (
        f'Traceback (most recent call last):\n  File "/job/train.py", line 4, in <module>\n{line}'
    )
    top = analyze_files(tmp_path, {"rank0.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("comm.version_mismatch", confidence)
    assert words in top.summary + top.title, top.summary


def test_nccls_missing_kernels_quoted_by_torch_read_as_nccls_own(tmp_path: Path) -> None:
    """torch quotes NCCL's last error on a line of its own, without NCCL's WARN prefix."""
    text = (
        "RuntimeError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268,"
        " unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
        "Cuda failure 'named symbol not found'\n"
    )
    top = analyze_files(tmp_path, {"rank0.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("comm.version_mismatch", 0.75)
    assert "named symbol not found" in top.summary


def test_an_ordinary_missing_library_is_not_a_cuda_build(tmp_path: Path) -> None:
    text = "ImportError: libGL.so.1: cannot open shared object file: No such file or directory"
    hypotheses = analyze_files(tmp_path, {"rank0.log": text}).hypotheses
    assert all(h.cause_id != "comm.version_mismatch" for h in hypotheses)
