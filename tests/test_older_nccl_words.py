"""Older NCCL's own words (2.4-2.18, where they differ from today's; real pastes where the
thread holds one, else the release's source): each reads as the newer wording does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # NVIDIA/nccl#290: a failed system call traced back to NCCL's shared-memory header
        ("gpu2-ru7:2143:2561 [1] NCCL INFO include/shm.h:41 -> 2", "comm.shm_exhausted"),
        # NCCL 2.4-2.9 named no peer address
        (
            "dgx1-node12:20417:20512 [2] include/socket.h:416 NCCL WARN Net : Connection closed by"
            " remote peer",
            "comm.peer_failure",
        ),
        # NVIDIA/nccl#792: NCCL 2.4.8's kernels on a GPU newer than its build
        (
            "node01:1297856:1297856 [0] enqueue.cc:197 NCCL WARN Cuda failure 'invalid device"
            " function'",
            "comm.version_mismatch",
        ),
        # NVIDIA/nccl-tests#166: a container without the driver's libcuda
        (
            "ubuntu:9621:9621 [0] misc/cudawrap.cc:179 NCCL WARN Failed to find CUDA library"
            " libcuda.so (NCCL_CUDA_PATH='') : libcuda.so: cannot open shared object file: No such"
            " file or directory",
            "config.backend_device",
        ),
        # NCCL 2.4-2.7's init.cc
        (
            "cluster-gpu-05:61230:61230 [5] init.cc:900 NCCL WARN Your program may be hanging,"
            " this may be caused by a collective mismatch around rank 5. Please check your"
            " collective calls at and around this rank. You can use NCCL_DEBUG=INFO and"
            " NCCL_DEBUG_SUBSYS=COLL to see the collective logs",
            "hang.mismatched_collective",
        ),
    ],
    ids=["shm-trace", "closed-no-peer", "invalid-device-function", "no-libcuda", "mismatch-hint"],
)
def test_older_nccls_words_read_as_the_newer(tmp_path: Path, line: str, cause: str) -> None:
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause, top.title


def test_nccls_may_be_hanging_hint_is_weaker_than_a_check_that_compared(tmp_path: Path) -> None:
    line = (
        "cluster-gpu-05:61230:61230 [5] init.cc:900 NCCL WARN Your program may be hanging, this may"
        " be caused by a collective mismatch around rank 5."
    )
    top = analyze_files(tmp_path, {"rank5.log": line + "\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.mismatched_collective", 0.5)


def test_a_trace_through_the_socket_header_is_the_networks_not_dev_shm(tmp_path: Path) -> None:
    """NVIDIA/nccl#844: the same `-> 2` through include/socket.h."""
    line = "696b7901f9044f23b786795c0ef7257b000000:39:298 [0] NCCL INFO include/socket.h:445 -> 2"
    causes = [h.cause_id for h in analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses]
    assert "comm.shm_exhausted" not in causes and causes[0].startswith("comm.")


def test_nccl_2_3s_interface_lines_read_as_the_bootstrap_line(tmp_path: Path) -> None:
    """NCCL 2.3 named each interface it took (`NET : Using interface lo:127.0.0.1<0>`,
    horovod/horovod#584) where later releases print `Bootstrap : Using lo:127.0.0.1<0>`."""
    old = (
        "node-a:4152:4206 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>\n"
        "node-a:4153:4209 [1] include/socket.h:361 NCCL WARN Call to connect timeout :"
        " Connection refused\n"
        "node-b:5152:5206 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>\n"
    )
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    new = old.replace("NET : Using interface ", "Bootstrap : Using ")
    read = [
        analyze_files(tmp_path / name, {"x.log": text}).hypotheses[0]
        for name, text in (("old", old), ("new", new))
    ]
    assert [(h.cause_id, h.confidence) for h in read] == [("comm.wrong_interface", 0.75)] * 2
