"""NCCL's `Connection closed by remote peer` where no peer can have died of its own: during
the bootstrap, or in a job of one rank. Something on the host closed the setup's sockets
(comm.rendezvous); a lost peer (comm.peer_failure) stays the reading in a collective."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

CLOSED = "node1:4211:4290 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer 10.10.1.3<36138>\n"  # noqa: E501
TRACE = "".join(
    f"node1:4211:4290 [0] NCCL INFO {where} -> 6\n"
    for where in ("misc/socket.cc:80", "misc/socket.cc:474", "{}.cc:701", "init.cc:1402")
)


def causes(tmp_path: Path, text: str) -> list[tuple[str, float]]:
    report = analyze_files(tmp_path, {"rank0.log": text})
    return [(h.cause_id, h.confidence) for h in report.hypotheses]


def test_closed_during_the_bootstrap_is_the_setup_not_a_dead_peer(tmp_path: Path) -> None:
    found = causes(tmp_path, CLOSED + TRACE.format("bootstrap"))
    assert found[0] == ("comm.rendezvous", 0.4)
    assert ("comm.peer_failure", 0.3) in found


def test_closed_in_a_job_of_one_rank_is_the_setup_not_a_dead_peer(tmp_path: Path) -> None:
    text = (
        "#  Rank  0 Group  0 Pid  70918 on node1 device  0 [0x01] NVIDIA RTX A6000\n"
        "node1:70918:70927 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by"
        " remote peer localhost<56086>\n"
    )
    assert causes(tmp_path, text)[0] == ("comm.rendezvous", 0.4)


def test_closed_in_a_collective_of_several_ranks_is_a_lost_peer(tmp_path: Path) -> None:
    text = (
        "#  Rank  0 Group  0 Pid  70918 on node1 device  0 [0x01] NVIDIA A100\n"
        "#  Rank  1 Group  0 Pid  70919 on node2 device  0 [0x01] NVIDIA A100\n"
        + CLOSED
        + TRACE.format("transport/net")
    )
    found = causes(tmp_path, text)
    assert found[0] == ("comm.peer_failure", 0.45)
    assert "comm.rendezvous" not in [cause for cause, _ in found]
