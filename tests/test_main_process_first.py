"""A stack inside main_process_first's barrier: the ranks that wait there wait for the main
process, which runs the block alone (tokenization, downloads, caching). With their timeout
that is the classic preprocessing that outlasted the process group's timeout; an error of
another kind raised in that barrier (an NCCL system error) is that error, not a wait.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

SP = "/usr/local/lib/python3.10/site-packages"
STACK = f"""\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 40, in <module>
[rank1]:     main()
[rank1]:   File "/work/train.py", line 21, in main
[rank1]:     with training_args.main_process_first(desc="dataset map tokenization"):
[rank1]:   File "/usr/lib/python3.10/contextlib.py", line 135, in __enter__
[rank1]:     return next(self.gen)
[rank1]:   File "{SP}/transformers/training_args.py", line 2314, in main_process_first
[rank1]:     dist.barrier()
[rank1]:   File "{SP}/torch/distributed/distributed_c10d.py", line 4159, in barrier
[rank1]:     work.wait()
"""
TIMEOUT = (
    "[rank1]: torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation"
    " timeout: WorkNCCL(SeqNum=1, OpType=BARRIER, NumelIn=1, NumelOut=1, Timeout(ms)=1800000)"
    " ran for 1800088 milliseconds before timing out.\n"
)
SYSTEM_ERROR = (
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1331,"
    " unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
)


def test_a_timeout_in_main_process_first_is_the_main_process_running_alone(
    tmp_path: Path,
) -> None:
    top = analyze_files(tmp_path, {"rank1.log": STACK + TIMEOUT}).hypotheses[0]
    assert (top.cause_id, top.confidence, top.ranks) == ("hang.rank_not_in_collective", 0.6, [0])
    assert "main_process_first" in top.summary and "timed out there" in top.summary


def test_a_stack_cut_in_main_process_first_is_a_weak_reading(tmp_path: Path) -> None:
    top = analyze_files(tmp_path, {"rank1.log": STACK}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_not_in_collective", 0.35)


def test_an_nccl_error_in_that_barrier_is_no_wait(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"rank1.log": STACK + SYSTEM_ERROR})
    assert report.hypotheses[0].cause_id.startswith("comm.")
    assert all(h.cause_id != "hang.rank_not_in_collective" for h in report.hypotheses)
