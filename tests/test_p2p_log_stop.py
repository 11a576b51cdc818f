"""NCCL's per-op COLL lines that stop on sends or receives read as a p2p wait.

The lines are NCCL's own format (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=COLL); a log that goes
on after its p2p ops, or whose last op is a collective, is no finding of this rule.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files


def _op(rank: int, coll: str, opcount: int, peer: int) -> str:
    return (
        f"node1:{4000 + rank}:{4100 + rank} [{rank}] NCCL INFO {coll}: opCount {opcount:x}"
        f" sendbuff 0x7f0000000000 recvbuff 0x7f0000100000 count 1572864 datatype 7 op 0"
        f" root {peer} comm 0x55d0b3a4c2e{rank} [nranks=2] stream 0x55d0b3a4d000"
    )


def _p2p_rules(tmp_path: Path, files: dict[str, str]) -> list[tuple[str, float]]:
    report = analyze_files(tmp_path, files)
    return [
        (h.rule_id, h.confidence) for h in report.hypotheses if h.rule_id == "logs.p2p_deadlock"
    ]


def test_both_ranks_stopped_sending_is_a_p2p_deadlock(tmp_path: Path) -> None:
    files = {
        f"rank{r}.log": "\n".join(_op(r, "AllReduce", n, 0) for n in range(1, 4))
        + "\n"
        + _op(r, "Send", 4, 1 - r)
        for r in (0, 1)
    }
    report = analyze_files(tmp_path, files)
    top = report.hypotheses[0]
    assert (top.cause_id, top.rule_id) == ("hang.p2p_deadlock", "logs.p2p_deadlock")
    assert top.confidence == 0.45 and "none receives" in top.summary


def test_a_send_and_a_recv_at_the_end_is_weaker(tmp_path: Path) -> None:
    files = {"rank0.log": _op(0, "Send", 4, 1), "rank1.log": _op(1, "Recv", 4, 0)}
    assert _p2p_rules(tmp_path, files) == [("logs.p2p_deadlock", 0.3)]


def test_a_log_that_goes_on_or_ends_in_a_collective_is_no_p2p_wait(tmp_path: Path) -> None:
    going_on = _op(0, "Send", 4, 1) + "\n" + "\n".join(f"step {n} loss 2.3" for n in range(40))
    collective = _op(0, "Send", 4, 1) + "\n" + _op(0, "AllReduce", 5, 0)
    for name, text in {"a": going_on, "b": collective}.items():
        (tmp_path / name).mkdir()
        assert _p2p_rules(tmp_path / name, {"rank0.log": text}) == [], name


CLOSED = Path(__file__).parent / "fixtures" / "recv_first_closed"


def test_a_rank_that_lost_its_peer_while_it_waited_in_the_same_receive_counts(
    tmp_path: Path,
) -> None:
    """Two ranks that both receive first (the fault matrix's recv_first job, checkout path
    replaced): rank 0 timed out in `dist.recv`; rank 1, in the same `dist.recv`, ended with
    gloo's `Connection closed by peer` instead (its last line stands for its timeout, as the
    matrix saw it under load, when rank 0 timed out and exited first). Both wait in a
    receive: the deadlock, not a rank that was elsewhere."""
    files = {p.name: p.read_text() for p in CLOSED.glob("rank*.log")}
    assert "Connection closed by peer" in files["rank1.log"]
    top = analyze_files(tmp_path, files).hypotheses[0]
    assert (top.cause_id, top.ranks) == ("hang.p2p_deadlock", [0, 1])
    assert "lost a peer that had" in top.summary
