"""MPI's own words for a job that ended (Open MPI's, MPICH's and Intel MPI's runtime, as
Horovod, DeepSpeed's MPI launch and nccl-tests print them): the rank they name, a SIGKILL,
a lost node, hosts that cannot connect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

BAD_TERMINATION = (
    "===================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   PID 12345 RUNNING AT node3\n"
    "=   EXIT CODE: {code}\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    "===================================================================================\n"
)


@pytest.mark.parametrize(
    ("text", "cause", "ranks"),
    [
        (
            "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n",
            "hang.rank_exited",
            [3],
        ),
        (
            "mpirun has exited due to process rank 5 with PID 0 on\nnode n3 exiting improperly."
            " There are three reasons this could occur:\n",
            "hang.rank_exited",
            [5],
        ),
        (BAD_TERMINATION.format(code=1), "hang.rank_exited", []),
        (BAD_TERMINATION.format(code=9), "oom.host", []),
        (
            "ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[12345,0],0]"
            " on node node0\n  Remote daemon: [[12345,0],3] on node node3\n",
            "hang.rank_exited",
            [],
        ),
        (
            "A process or daemon was unable to complete a TCP connection\nto another process:\n"
            "  Local host:    node0\n  Remote host:   node3\nThis is usually caused by a firewall"
            " on the remote host.\n",
            "comm.rendezvous",
            [],
        ),
    ],
    ids=[
        "abort",
        "exited-improperly",
        "bad-termination",
        "bad-termination-sigkill",
        "lost-daemon",
        "tcp",
    ],
)
def test_mpis_words_read_as_their_cause(
    tmp_path: Path, text: str, cause: str, ranks: list[int]
) -> None:
    top = analyze_files(tmp_path, {"mpirun.log": text}).hypotheses[0]
    assert (top.cause_id, top.ranks) == (cause, ranks), top.title


def test_an_abort_beside_nccls_own_failure_leaves_the_nccl_reading(tmp_path: Path) -> None:
    """nccl-tests calls MPI_Abort after NCCL's error: the abort names no cause, so NCCL's bare
    internal error across two hosts is still read as the interface (a `dev` case's output)."""
    case = json.loads(
        (REPO / "tests/cases/comm/nccl-socket-ifname-differs-per-node-nccl-tests.json").read_text()
    )
    assert case["split"] == "dev"
    text = case["evidence"] + "\nMPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n"
    top = analyze_files(tmp_path, {"nccl-tests.log": text}).hypotheses[0]
    assert top.cause_id == "comm.wrong_interface"
