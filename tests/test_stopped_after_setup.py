"""A log that says only how NCCL set its communicators up, and stops a few lines after
`Init COMPLETE`, shows a job stalled at or before its first collective: a weak
hang.unknown, never when anything else follows. The lines are from a public report's
NCCL_DEBUG=INFO log (vllm-project/vllm, in the corpus's dev split)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO, analyze_files

CASE = REPO / "tests/cases/comm/vllm-tp2-a6000-ada-stalls-acs-iommu.json"
SETUP = json.loads(CASE.read_text())["evidence"]
COLL = (
    "HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23665 [0] NCCL INFO AllReduce: opCount 0"
    " sendbuff 0x7f3a2c600000 recvbuff 0x7f3a2c600000 count 1024 datatype 7 op 0 root 0"
    " comm 0x23ba7ea0 [nranks=2] stream 0x5593c2c0"
)


def weak_hang(report_dir: Path, text: str) -> list[str]:
    report = analyze_files(report_dir, {"rank0.log": text})
    return [h.summary for h in report.hypotheses if h.rule_id == "logs.hang_markers"]


def test_a_log_that_stops_after_nccl_setup_reads_as_a_weak_hang(tmp_path: Path) -> None:
    (summary,) = weak_hang(tmp_path, SETUP)
    assert "stops right after NCCL set its communicators up" in summary


def test_a_collective_after_setup_is_progress(tmp_path: Path) -> None:
    assert weak_hang(tmp_path, SETUP + "\n" + COLL) == []


def test_a_run_that_goes_on_after_setup_is_no_stall(tmp_path: Path) -> None:
    steps = "\n".join(f"step {n} loss {2.5 - n / 100:.3f}" for n in range(30))
    assert weak_hang(tmp_path, SETUP + "\n" + steps) == []


#: NCCL's proxy chatter after `Init COMPLETE`, in the shape NCCL 2.2x prints it (as in
#: NVIDIA/nccl#1936's log): no collective, nothing of the program.
CHATTER = "\n".join(
    f"HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:2377{n % 10} [0] NCCL INFO"
    f" proxyProgressAsync opId=0x7fc26facee{n:02x} op.type=1 op.reqBuff=0x7fc24000c190"
    " op.respSize=16 done"
    for n in range(30)
)


def test_a_log_that_ends_in_nccl_chatter_after_setup_is_a_weak_hang(tmp_path: Path) -> None:
    (summary,) = weak_hang(tmp_path, SETUP + "\n" + CHATTER)
    assert "stops right after NCCL set its communicators up" in summary


def test_a_log_that_ends_in_nccl_teardown_is_no_stall(tmp_path: Path) -> None:
    teardown = (
        "HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23771 [0] NCCL INFO [Service thread]"
        " Connection closed by localRank 1"
    )
    assert weak_hang(tmp_path, SETUP + "\n" + CHATTER + "\n" + teardown) == []
