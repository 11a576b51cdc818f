"""torch's own C++ words for distributed failures (ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp,
socket.cpp, TCPStoreLibUvBackend.cpp, as torch 2.6+ prints them, and older torch's where it
differs): each reads as its cause, with the rank a line names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_cli, analyze_files

PG = "[PG ID 0 PG GUID 0(default_pg) Rank 3]"


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "[rank3]:[E1127 06:50:01.258079789 ProcessGroupNCCL.cpp:740] [Rank 3] Work"
            " WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576,"
            " Timeout(ms)=600000) timed out in blocking wait.",
            "hang.collective_timeout",
        ),
        (
            "[E1127 06:50:01.123456789 ProcessGroupGloo.cpp:67] Rank 0 timed out in"
            " monitoredBarrier after 30000 ms.",
            "hang.collective_timeout",
        ),
        (
            f"[rank3]:[F1127 06:50:01.432297789 ProcessGroupNCCL.cpp:1512] {PG} Terminating the"
            " process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
            "hang.collective_timeout",
        ),
        (
            f"[rank3]:[E1127 06:50:01.471892789 ProcessGroupNCCL.cpp:1830] {PG} Could not acquire"
            " GIL within 300 ms on exit, possible GIL induced hang",
            "hang.collective_timeout",
        ),
        (
            f"[rank3]:[E1127 06:50:01.448135789 ProcessGroupNCCL.cpp:1710] {PG} Observed flight"
            " recorder dump signal from another rank via TCPStore.",
            "hang.unknown",
        ),
        (
            "[E1127 06:50:02.899337789 socket.cpp:818] [c10d] The client socket has failed to"
            " connect to any network address of (node-03, 29500).",
            "comm.rendezvous",
        ),
        (
            "torch.distributed.DistBackendError: NCCL timeout in communicator initialization.",
            "comm.unknown",
        ),
        (
            "torch.distributed.DistNetworkError: Failed to send, sent 0 bytes. Connection was"
            " likely closed. Did the remote end crash?",
            "comm.peer_failure",
        ),
        (
            "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3.",
            "comm.peer_failure",
        ),
        (
            "torch.distributed.DistNetworkError: Ping failed, invalid value returned from server."
            " Expected: 48213, Got: 0",
            "comm.rendezvous",
        ),
        (
            "RuntimeError: Timeout waiting for key: default_pg/0//cuda//0 after 1800000 ms",
            "comm.rendezvous",
        ),
        ("RuntimeError: Cannot resolve node-03 to a (local) address", "comm.wrong_interface"),
        (
            "torch.distributed.DistBackendError: Not able to create/get the NCCL Communicator"
            " since the GPU devices are not known. If you want to run a collective, please call"
            " torch.cuda.set_device() first",
            "config.device_assignment",
        ),
        (
            "ValueError: Failed to infer a GPU device id to perform barrier.",
            "config.device_assignment",
        ),
        (
            "RuntimeError: Tensor's dim 0 does not divide equally across group size",
            "config.world_size_mismatch",
        ),
        (
            "ValueError: ProcessGroupNCCL::gather: Incorrect output list size 4. Output list size"
            " should be 8, same as size of the process group.",
            "config.world_size_mismatch",
        ),
        (
            "ValueError: AVG requires NCCL 2.10+. The current version is 2.9",
            "config.backend_device",
        ),
        (
            "RuntimeError: all_reduce does not support MAX on complex tensors",
            "config.backend_device",
        ),
        ("RuntimeError: Unsupported Float8 type for NCCL reduction", "config.backend_device"),
    ],
    ids=[
        "blocking-wait",
        "monitored-barrier-own-timeout",
        "watchdog-hang",
        "gil",
        "dump-signal",
        "connect-any-address",
        "nccl-init-timeout",
        "send-closed",
        "communicator-aborted",
        "store-ping",
        "filestore-key",
        "gloo-hostname",
        "gpu-unknown",
        "barrier-device",
        "split-sizes",
        "gather-list-size",
        "avg-old-nccl",
        "complex-max",
        "float8-type",
    ],
)
def test_torchs_own_words_read_as_their_cause(tmp_path: Path, line: str, cause: str) -> None:
    top = analyze_files(tmp_path, {"rank3.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause, (top.cause_id, top.title)


def test_the_rank_nccl_names_in_a_remote_error_is_the_culprit(tmp_path: Path) -> None:
    text = (
        "[rank3]:[E1127 06:50:01.543163789 ProcessGroupNCCL.cpp:2074] [PG ID 2 PG GUID 5 Rank"
        " 3]  remote error detected from rank: 6\n"
        "[rank3]: torch.distributed.DistBackendError: NCCL error in:"
        " /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, remote process exited"
        " or there was a network error, NCCL version 2.26.2\n"
    )
    top = analyze_files(tmp_path, {"rank3.log": text}).hypotheses[0]
    assert (top.cause_id, top.ranks, top.confidence) == ("comm.peer_failure", [6], 0.5)
    assert "rank 6's own output" in top.fix and "Rank 3 only reports losing it" in top.summary


def test_the_rank_that_aborted_first_is_named_by_older_torch_too(tmp_path: Path) -> None:
    """torch 1.8-1.13 with NCCL_ASYNC_ERROR_HANDLING: the key the first rank left in the store."""
    text = (
        "W1127 06:50:01.543163 2871 ProcessGroupNCCL.cpp:410] [Rank 3] Found key in store:"
        " NCCLABORTEDCOMM:9d1a4c3e, from rank: 0. This means that rank has aborted its NCCL"
        " communicators previously and is not in a healthy state.. Aborting appropriate"
        " communicators\n"
    )
    top = analyze_files(tmp_path, {"rank3.log": text}).hypotheses[0]
    assert (top.cause_id, top.ranks, top.confidence) == ("comm.peer_failure", [0], 0.5)
    assert "aborted its communicators first" in top.summary and "it is a victim" in top.summary


def test_a_store_out_of_descriptors_is_named_in_lower_case_too(tmp_path: Path) -> None:
    line = (
        "[W1127 06:50:03.384421789 TCPStoreLibUvBackend.cpp:1247] [c10d] Failed to accept client"
        " due to Failed to accept socket. code: -24, name: EMFILE, message: too many open files"
    )
    top = analyze_files(tmp_path, {"store.log": line + "\n"}).hypotheses[0]
    assert "open-files limit" in top.summary or "ulimit -n" in top.fix, top


def test_an_abort_for_this_ranks_own_timeout_is_no_lost_peer(tmp_path: Path) -> None:
    """Older torch appends the abort's reason: a timeout of the rank's own is a stall."""
    line = (
        "RuntimeError: NCCL communicator was aborted on rank 0.  Original reason for failure"
        " was: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4015,"
        " OpType=_ALLGATHER_BASE, Timeout(ms)=1800000) ran for 1806375 milliseconds before"
        " timing out."
    )
    causes = [h.cause_id for h in analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses]
    assert causes[0] == "hang.collective_timeout" and "comm.peer_failure" not in causes, causes


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # torch 1.7's NCCL_BLOCKING_WAIT and async error handling
        ("RuntimeError: Operation timed out!", "hang.collective_timeout"),
        (
            "terminate called after throwing an instance of 'std::runtime_error'\n  what():  NCCL"
            " Operation Timed Out",
            "hang.collective_timeout",
        ),
        # torch 1.6-1.9's NCCLComm::getNcclComm, without the rank
        ("RuntimeError: NCCL communicator was aborted.", "comm.peer_failure"),
        # torch 1.5-1.12's shared-memory file, before the reason was appended (a full /dev/shm)
        ("RuntimeError: unable to write to file </torch_30135_3865702978>", "comm.shm_exhausted"),
        (
            "RuntimeError: Tensor list input to scatter/gather must match number of collective"
            " participants",
            "config.world_size_mismatch",
        ),
        (
            "RuntimeError: ProcessGroupNCCL only supports send for NCCL lib version >= 2.7.0",
            "config.backend_device",
        ),
        # TORCH_DISTRIBUTED_DEBUG=DETAIL in torch 1.9-1.10 (ProcessGroupWrapper)
        (
            "RuntimeError: Mismatch between collective operation types across ranks.This likely"
            " indicates an application bug where different ranks are calling different"
            " collectives. Rank 1 is calling collective: ALLREDUCE",
            "hang.mismatched_collective",
        ),
        (
            "RuntimeError: Error when verifying shape tensors for collective ALLREDUCE on rank 0."
            " This likely indicates that input shapes into the collective are mismatched across"
            " ranks. Got shapes:  10\n[ torch.LongTensor{1} ]",
            "hang.shape_mismatch",
        ),
        # torchelastic 1.9-1.13's stdlib logging; -7 is SIGBUS (a full /dev/shm in a container)
        (
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank:"
            " 0 (pid: 3311) of binary: /usr/bin/python3",
            "comm.shm_exhausted",
        ),
    ],
    ids=[
        "blocking-wait-1.7",
        "async-timeout-1.7",
        "aborted-no-rank",
        "shm-file-no-reason",
        "gather-list-size",
        "send-needs-nccl-2.7",
        "detail-op-1.9",
        "detail-shape-1.9",
        "sigbus-exit",
    ],
)
def test_older_torchs_words_read_as_the_newer_ones(tmp_path: Path, line: str, cause: str) -> None:
    """torch 1.5-1.13's own wordings (torch/lib/c10d at those releases, torch/distributed)."""
    top = analyze_files(tmp_path, {"rank1.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause, top.title


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        ("NCCL error: unhandled system error, NCCL version 2.10.3", "comm.unknown"),
        ("CUDA error: an illegal memory access was encountered", "hang.rank_exited"),
        (
            "NCCL error: remote process exited or there was a network error, NCCL version 2.14.3",
            "comm.peer_failure",
        ),
    ],
    ids=["own-nccl-error", "own-cuda-fault", "peer-gone"],
)
def test_an_abort_is_a_lost_peer_only_when_its_reason_is_a_peers(
    tmp_path: Path, reason: str, cause: str
) -> None:
    """torch's abort names the failure its watchdog saw first (NCCLUtils' getNcclComm:
    `NCCL communicator was aborted on rank 2.  Original reason for failure was: ...`)."""
    line = f"RuntimeError: NCCL communicator was aborted on rank 2.  Original reason for failure was: {reason}"
    top = analyze_files(tmp_path, {"rank2.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause, top.title


def test_the_stores_key_a_rank_waited_for_is_kept_in_the_report(tmp_path: Path) -> None:
    """The key's name is a fact of the rendezvous, not a secret the JSON report hides."""
    line = (
        "torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving"
        " ncclUniqueId from [0] via c10d key-value store by key '0:1', but store->get('0:1') got"
        " error: Connection reset by peer"
    )
    (tmp_path / "rank1.log").write_text(line + "\n")
    report = analyze_cli(tmp_path / "rank1.log")
    fields = [
        e["data"]["fields"]
        for e in report["evidence"]
        if e["kind"] == "log_signal" and e["data"]["signature"] == "hang.unique_id_timeout"
    ]
    assert {"rank": 1, "root": 0, "entry": "0:1"}.items() <= fields[0].items(), fields
