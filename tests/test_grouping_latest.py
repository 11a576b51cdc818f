"""One stack per rank: a rank dumped twice is one rank, where it stood last."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files
from triage.grouping import group_ranks, latest_stacks, merged_stacks
from triage.models import Evidence
from triage.observations import Frame
from triage.readers.stacks import classify
from triage.registry import EvidenceSet

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def stack(rank: int | None, op: str | None, line: int, *, pid: int, source: str) -> Evidence:
    frames = [Frame(function="train", file="/job/train.py", line=line)]
    if op:
        frames.insert(0, Frame(function=op, file=C10D, line=100))
    state = classify(frames, pid=pid, rank=rank)
    return Evidence(
        id=f"stack:{source}",
        kind="stack",
        source=source,
        rank=rank,
        summary="",
        data=state.model_dump(mode="json"),
    )


def test_the_last_dump_of_a_rank_is_its_state() -> None:
    evidence = EvidenceSet(
        [
            stack(3, None, 12, pid=-4, source="rank3.txt:1"),  # a minute earlier: computing
            stack(0, "all_reduce", 6, pid=-1, source="rank0.txt:1"),
            stack(3, "all_reduce", 6, pid=-4, source="rank3.txt:40"),
        ]
    )
    latest = [(s.rank, s.op) for _, s in latest_stacks(evidence)]
    assert latest == [(3, "all_reduce"), (0, "all_reduce")]
    groups = group_ranks(evidence)
    assert [(g.state, g.ranks) for g in groups] == [("collective all_reduce", [0, 3])]
    assert not any("train.py:12" in line for line in merged_stacks(evidence))


def test_a_live_stack_is_newer_than_a_dump_in_a_log() -> None:
    evidence = EvidenceSet(
        [
            stack(1, "all_reduce", 6, pid=4321, source="pid:4321"),
            stack(1, "broadcast", 8, pid=-2, source="rank1.log:7"),
        ]
    )
    [(item, state)] = latest_stacks(evidence)
    assert item.source == "pid:4321" and state.op == "all_reduce"


def test_stacks_of_unknown_rank_stay_apart_by_pid() -> None:
    evidence = EvidenceSet(
        [
            stack(None, "all_reduce", 6, pid=101, source="pid:101"),
            stack(None, "all_reduce", 6, pid=102, source="pid:102"),
            stack(None, "all_reduce", 6, pid=101, source="pid:101"),
        ]
    )
    [group] = group_ranks(evidence)
    assert group.ranks == [] and group.pids == [101, 102]


# `py-spy dump --pid` (text) of the two gloo ranks of
# triage/scenarios/jobs/mismatched_collective.py: rank 1 dumped first while it still set up
# (importlib frames between the innermost and the optimizer's trimmed), then in the hang;
# its faulthandler dump (PYTHONFAULTHANDLER=1) when it was sent SIGABRT afterwards.
RANK0 = """\
Process 13705: /work/main/.venv/bin/python /work/main/triage/scenarios/jobs/mismatched_collective.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 13705 (idle): "MainThread"
    broadcast (torch/distributed/distributed_c10d.py:4055)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    main (mismatched_collective.py:53)
    <module> (mismatched_collective.py:62)
"""

RANK1_TWICE = """\
Process 13706: /work/main/.venv/bin/python /work/main/triage/scenarios/jobs/mismatched_collective.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 13706 (active+gil): "MainThread"
    Signature.from_callable (inspect.py:3028)
    signature (inspect.py:3280)
    DefaultHandler._init_cls (torch/_inductor/ops_handler.py:850)
    <module> (torch/_inductor/ops_handler.py:879)
    _call_with_frames_removed (<frozen importlib._bootstrap>:241)
    _disable_dynamo.<locals>.inner (torch/_compile.py:47)
    Optimizer.__init__ (torch/optim/optimizer.py:442)
    SGD.__init__ (torch/optim/sgd.py:66)
    main (mismatched_collective.py:39)
    <module> (mismatched_collective.py:62)
Process 13706: /work/main/.venv/bin/python /work/main/triage/scenarios/jobs/mismatched_collective.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 13706 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:4181)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    average_gradients (mismatched_collective.py:26)
    main (mismatched_collective.py:54)
    <module> (mismatched_collective.py:62)
"""

RANK1_FAULTHANDLER = """\
rank 1 step 0 loss 0.8255
rank 1 step 1 loss 1.4005
rank 1 step 2 loss 0.6106
TRIAGE-SCENARIO: armed
Fatal Python error: Aborted

Current thread 0x00007fb9fa884b80 (most recent call first):
  File "/work/job/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4181 in all_reduce
  File "/work/job/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/work/job/mismatched_collective.py", line 26 in average_gradients
  File "/work/job/mismatched_collective.py", line 54 in main
  File "/work/job/mismatched_collective.py", line 62 in <module>

Extension modules: numpy._core._multiarray_umath, numpy.linalg._umath_linalg, torch._C (total: 3)
"""


def test_analyze_counts_a_rank_dumped_three_times_once(tmp_path: Path) -> None:
    report = analyze_files(
        tmp_path,
        {"rank0.txt": RANK0, "rank1.txt": RANK1_TWICE, "rank1.log": RANK1_FAULTHANDLER},
    )
    stacks = [e for e in report.evidence if e.kind == "stack"]
    assert sorted(e.rank for e in stacks if e.rank is not None) == [0, 1, 1, 1]
    groups = {tuple(g.ranks): g.state for g in report.rank_groups}
    assert groups == {(0,): "collective broadcast", (1,): "collective all_reduce"}
    top = report.hypotheses[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert "compute" not in top.summary
