"""Hang rules on hand-built evidence: one situation per rule, plus the grouping."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from triage.engine import decide
from triage.models import Evidence, Report
from triage.observations import Frame, MissingRank, RankProcess, RankState
from triage.playbooks import get_playbook
from triage.readers.stacks import classify

SITE = "/venv/lib/python3.11/site-packages"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"

TRAIN = """\
import torch.distributed as dist


def train(rank, batches, x):
    for step in batches:
        dist.all_reduce(x)
        if rank == 0 and step == 3:
            dist.broadcast(x, src=0)
    dist.barrier()


def main():
    train(0, [], None)
"""


def state(
    rank: int, op: str | None, file: str, line: int, active: bool = False, **locals_: str
) -> RankState:
    frames = [
        Frame(function="train", file=file, line=line),
        Frame(function="main", file=file, line=13),
    ]
    if op:
        frames.insert(0, Frame(function=op, file=C10D, line=100, locals=dict(locals_)))
    return classify(frames, pid=1000 + rank, rank=rank, active=active)


def report_of(
    *states: RankState,
    missing: Sequence[MissingRank] = (),
    processes: Sequence[RankProcess] = (),
) -> Report:
    evidence = [
        Evidence(
            id=f"stack:rank{s.rank}",
            kind="stack",
            source=f"pid:{s.pid}",
            rank=s.rank,
            summary="",
            data=s.model_dump(mode="json"),
        )
        for s in states
    ]
    evidence += [
        Evidence(
            id=f"missing:rank{m.rank}",
            kind="missing_rank",
            source="h",
            summary="",
            data=m.model_dump(),
        )
        for m in missing
    ]
    evidence += [
        Evidence(id=f"process:{p.pid}", kind="process", source="h", summary="", data=p.model_dump())
        for p in processes
    ]
    return decide(get_playbook("hang"), Report(symptom="hang", playbook="hang", evidence=evidence))


def source(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return str(path)


def test_conditional_collective_is_a_mismatch_with_its_branch(tmp_path: Path) -> None:
    f = source(tmp_path)
    report = report_of(
        state(0, "broadcast", f, 8), *(state(r, "all_reduce", f, 6) for r in (1, 2, 3))
    )
    top = report.hypotheses[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [0] and top.location and top.location.line == 8
    assert "if rank == 0 and step == 3:" in top.summary
    assert [g.ranks for g in report.rank_groups] == [[1, 2, 3], [0]]


def test_rank_past_the_loop_is_uneven_inputs(tmp_path: Path) -> None:
    f = source(tmp_path)
    report = report_of(
        state(3, "barrier", f, 9), *(state(r, "all_reduce", f, 6) for r in (0, 1, 2))
    )
    top = report.hypotheses[0]
    assert top.cause_id == "hang.uneven_inputs"
    assert top.ranks == [3] and top.location and top.location.line == 9
    assert "hang.mismatched_collective" not in [h.cause_id for h in report.hypotheses]


def test_a_tie_past_the_loop_names_the_side_that_left_first(tmp_path: Path) -> None:
    """Two ranks, one on each side: the one past the loop ran out of data first, at a
    confidence below the one a majority gives."""
    f = source(tmp_path)
    top = report_of(state(0, "barrier", f, 9), state(1, "all_reduce", f, 6)).hypotheses[0]
    assert top.cause_id == "hang.uneven_inputs"
    assert top.ranks == [0] and top.location and top.location.line == 9
    assert top.confidence <= 0.7


def test_busy_rank_is_not_in_collective(tmp_path: Path) -> None:
    f = source(tmp_path)
    report = report_of(
        state(2, None, f, 5, active=True), *(state(r, "all_reduce", f, 6) for r in (0, 1, 3))
    )
    top = report.hypotheses[0]
    assert top.cause_id == "hang.rank_not_in_collective"
    assert top.ranks == [2] and top.location and top.location.line == 5


def test_recv_recv_is_a_p2p_deadlock(tmp_path: Path) -> None:
    f = source(tmp_path)
    report = report_of(state(0, "recv", f, 6, src="1"), state(1, "recv", f, 6, src="0"))
    top = report.hypotheses[0]
    assert top.cause_id == "hang.p2p_deadlock"
    assert top.ranks == [0, 1]
    assert "each waits for a peer" in top.summary.lower()


def test_missing_rank_is_rank_exited(tmp_path: Path) -> None:
    f = source(tmp_path)
    missing = [MissingRank(rank=3, world_size=4, scope="host", reason="gone")]
    report = report_of(*(state(r, "all_reduce", f, 6) for r in (0, 1, 2)), missing=missing)
    top = report.hypotheses[0]
    assert top.cause_id == "hang.rank_exited"
    assert top.ranks == [3] and top.confidence >= 0.85
    assert report.rank_groups[-1].state == "no live process"


def test_ranks_whose_stacks_were_read_are_not_called_exited(tmp_path: Path) -> None:
    """The job ended between the stack dumps and the process scan (a timeout, the launcher's
    teardown): the ranks read alive did not leave first; only rank 2 did."""
    f = source(tmp_path)
    missing = [MissingRank(rank=r, world_size=4, scope="host", reason="gone") for r in range(4)]
    report = report_of(*(state(r, "all_reduce", f, 6) for r in (0, 1, 3)), missing=missing)
    exited = [h for h in report.hypotheses if h.cause_id == "hang.rank_exited"]
    assert exited and exited[0].ranks == [2]
    assert "Rank 2 has no live process" in exited[0].summary


def test_remote_ranks_are_not_called_exited(tmp_path: Path) -> None:
    f = source(tmp_path)
    missing = [MissingRank(rank=9, world_size=16, scope="job", reason="other host")]
    report = report_of(*(state(r, "all_reduce", f, 6) for r in (0, 1, 2)), missing=missing)
    assert report.hypotheses[0].cause_id != "hang.rank_exited"


def test_new_group_on_some_ranks_is_a_subgroup_mismatch(tmp_path: Path) -> None:
    f = source(tmp_path)
    report = report_of(
        state(1, "new_group", f, 6),
        state(2, "new_group", f, 6),
        state(0, "all_reduce", f, 8),
        state(3, "all_reduce", f, 8),
    )
    top = report.hypotheses[0]
    assert top.cause_id == "hang.subgroup_mismatch"
    assert top.ranks == [0, 3]  # membership unknown: every rank elsewhere


def test_everyone_in_one_place_is_unknown_with_next_steps(tmp_path: Path) -> None:
    f = source(tmp_path)
    report = report_of(*(state(r, "all_reduce", f, 6) for r in range(4)))
    assert report.hypotheses[0].cause_id == "hang.unknown"
    assert any("Flight Recorder" in s for s in report.next_steps)


def test_a_rank_its_stack_names_is_not_missing(tmp_path: Path) -> None:
    """mp.spawn's ranks are known from their stacks only: discovery's 'no process holds
    rank N' is void for every rank a stack names, so the stack rules still decide."""
    f = source(tmp_path)
    missing = [
        MissingRank(rank=r, world_size=4, scope="host", reason="no live process") for r in range(4)
    ]
    report = report_of(*(state(r, "all_reduce", f, 6) for r in range(4)), missing=missing)
    top = report.hypotheses[0]
    assert top.rule_id == "stacks.no_culprit_visible", top
    assert "hang.rank_exited" not in [h.cause_id for h in report.hypotheses]


def test_unreadable_ranks_lower_confidence(tmp_path: Path) -> None:
    f = source(tmp_path)
    states = [state(0, "broadcast", f, 8), *(state(r, "all_reduce", f, 6) for r in (1, 2, 3))]
    full = report_of(*states).hypotheses[0].confidence
    unread = [RankProcess(pid=2000 + r, rank=r, world_size=8, host="h") for r in range(4, 8)]
    partial = report_of(*states, processes=unread).hypotheses[0].confidence
    assert partial < full


def test_4096_ranks_read_as_a_few_groups(tmp_path: Path) -> None:
    f = source(tmp_path)
    states = [state(r, "all_reduce", f, 6) for r in range(4096) if r != 1234]
    states.append(state(1234, "broadcast", f, 8))
    report = report_of(*states)
    assert [len(g.ranks) for g in report.rank_groups] == [4095, 1]
    assert report.hypotheses[0].ranks == [1234]
    from triage.grouping import merged_stacks
    from triage.registry import EvidenceSet

    lines = merged_stacks(EvidenceSet(report.evidence))
    assert len(lines) == 3 and lines[1].lstrip().startswith("[0-1233,1235-4095]")


def test_new_group_member_that_skipped_is_the_culprit(tmp_path: Path) -> None:
    f = source(tmp_path)
    report = report_of(
        state(1, "new_group", f, 6, ranks="[1, 2, 3]"),
        state(2, "new_group", f, 6, ranks="[1, 2, 3]"),
        state(0, "all_reduce", f, 8),
        state(3, "all_reduce", f, 8),
    )
    top = report.hypotheses[0]
    assert top.cause_id == "hang.subgroup_mismatch"
    assert top.ranks == [3]
    assert "member of the new group [1, 2, 3]" in top.summary


EPOCHS = """\
import torch.distributed as dist


def fit(rank, x):
    for epoch in range(3):
        for step in range(5):
            dist.all_reduce(x)
        if rank != 2:
            dist.all_gather_object([None], x)
"""


def test_branch_inside_the_epoch_loop_is_a_mismatch_not_uneven(tmp_path: Path) -> None:
    path = tmp_path / "fit.py"
    path.write_text(EPOCHS)
    f = str(path)

    def at(rank: int, op: str, line: int) -> RankState:
        frames = [Frame(function=op, file=C10D, line=1), Frame(function="fit", file=f, line=line)]
        return classify(frames, pid=rank, rank=rank, active=False)

    report = report_of(at(2, "all_reduce", 7), *(at(r, "all_gather_object", 9) for r in (0, 1, 3)))
    top = report.hypotheses[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [2]
    assert "if rank != 2:" in top.summary


def test_source_of_another_host_is_found_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logs name the job's own paths; a checkout elsewhere still answers by the path's tail."""
    from triage.readers import source

    project = tmp_path / "checkout" / "proj"
    project.mkdir(parents=True)
    (project / "train.py").write_text(
        "def main(rank):\n    for step in range(10):\n        if rank == 0:\n            pass\n"
    )
    monkeypatch.chdir(tmp_path / "checkout")
    source._module.cache_clear()
    recorded = "/home/alice/jobs/proj/train.py"
    assert source.rank_condition(recorded, 4) is not None
    assert source.innermost_loop(recorded, 4) is not None
    assert source.rank_condition("/home/alice/jobs/proj/missing.py", 4) is None
    source._module.cache_clear()


ASYNC = """\
import torch.distributed as dist


def train(rank, batches, grads):
    for step in batches:
        pending = []
        for g in grads:
            if not (rank == 2 and step == 3):
                pending.append(dist.all_reduce(g, async_op=True))
        finish(pending)
    dist.barrier()


def finish(pending):
    for work in pending:
        work.wait()
"""


def test_a_rank_that_skipped_an_async_collective_is_not_past_the_loop(tmp_path: Path) -> None:
    """The others wait in work.wait() (in another function, no `if` on their lines); the
    rank at the final barrier skipped the async all_reduce under the rank-dependent `if`."""
    f = tmp_path / "train.py"
    f.write_text(ASYNC)
    at = str(f)

    def stacked(rank: int, frames: list[Frame]) -> RankState:
        return classify(frames, pid=1000 + rank, rank=rank, active=False)

    waiting = [
        stacked(
            r,
            [Frame(function="finish", file=at, line=16), Frame(function="train", file=at, line=10)],
        )
        for r in (0, 1, 3)
    ]
    barrier = Frame(function="barrier", file=C10D, line=100)
    culprit = stacked(2, [barrier, Frame(function="train", file=at, line=11)])
    top = report_of(culprit, *waiting).hypotheses[0]
    assert top.cause_id == "hang.mismatched_collective", top
    assert top.ranks == [2] and top.location and top.location.line == 9
    assert "if not (rank == 2 and step == 3):" in top.summary


def test_a_tie_is_read_by_the_call_the_side_ahead_may_have_skipped(tmp_path: Path) -> None:
    """One rank waits for an async all_reduce, the other stands at the barrier after the
    loop: the one ahead may have skipped the call under the `if` that leaves ranks out (or
    run fewer steps), so it is named at that call, at a tie's confidence."""
    f = tmp_path / "train.py"
    f.write_text(ASYNC)
    at = str(f)
    waiting = classify(
        [Frame(function="finish", file=at, line=16), Frame(function="train", file=at, line=10)],
        pid=1000,
        rank=0,
    )
    barrier = Frame(function="barrier", file=C10D, line=100)
    ahead = classify([barrier, Frame(function="train", file=at, line=11)], pid=1002, rank=2)
    top = report_of(waiting, ahead).hypotheses[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [2] and top.location and top.location.line == 9
    assert 0.5 <= top.confidence <= 0.7 and "hang.uneven_inputs" in top.summary


BACKWARD = """\
import torch
import torch.distributed as dist


class SyncGrad(torch.autograd.Function):
    @staticmethod
    def backward(ctx, grad):
        if ctx.sync:
            dist.all_reduce(grad)
        return grad, None


def train(rank, batches, net):
    for step in batches:
        loss = net(step)
        loss.backward()
    dist.barrier()
"""


def _backward_hang(tmp_path: Path, text: str) -> Report:
    f = tmp_path / "train.py"
    f.write_text(text)
    at = str(f)
    all_reduce = Frame(function="all_reduce", file=C10D, line=100)
    engine = Frame(function="_engine_run_backward", file=f"{SITE}/torch/autograd/graph.py", line=9)
    waiting = [
        classify(
            [
                all_reduce,
                Frame(function="SyncGrad.backward", file=at, line=9),
                engine,
                Frame(function="train", file=at, line=16),
            ],
            pid=1000 + r,
            rank=r,
            active=False,
        )
        for r in (0, 1, 3)
    ]
    barrier = Frame(function="barrier", file=C10D, line=100)
    culprit = classify(
        [barrier, Frame(function="train", file=at, line=17)], pid=1002, rank=2, active=False
    )
    return report_of(culprit, *waiting)


def test_others_waiting_in_a_conditional_collective_rank_a_skip_and_uneven_inputs_close(
    tmp_path: Path,
) -> None:
    """The others wait in an all_reduce under `if ctx.sync:` in an autograd Function's
    backward; the rank at the final barrier may have had it false once (a skip) or run
    fewer steps: both hypotheses, close, the skip first, neither at 0.8."""
    found = _backward_hang(tmp_path, BACKWARD).hypotheses
    top, second = found[0], found[1]
    assert top.cause_id == "hang.mismatched_collective", found
    assert top.ranks == [2] and top.location and top.location.line == 9
    assert "`if ctx.sync:`" in top.summary and "step count" in top.summary
    assert second.cause_id == "hang.uneven_inputs"
    assert top.confidence < 0.8 and top.confidence - second.confidence <= 0.15


def test_a_guard_every_rank_answers_alike_leaves_uneven_inputs_alone(tmp_path: Path) -> None:
    found = _backward_hang(
        tmp_path, BACKWARD.replace("if ctx.sync:", "if dist.is_initialized():")
    ).hypotheses
    assert found[0].cause_id == "hang.uneven_inputs" and found[0].confidence >= 0.8
    assert "hang.mismatched_collective" not in {h.cause_id for h in found}


MESH = """\
import torch.distributed as dist


def train(rank, bad, batches, stats, grad, tp, dp):
    for step in batches:
        if not (rank == bad and step == 3):
            dist.all_reduce(stats, group=tp)
        dist.all_reduce(grad, group=dp)
    dist.barrier()
"""


def test_a_skip_on_one_mesh_dimension_names_the_ranks_past_the_loop(tmp_path: Path) -> None:
    """A 2x2 mesh: rank 2 skipped its tp all_reduce once. Ranks 0 and 2 reach the final
    barrier, rank 3 waits in the tp all_reduce under the `if`, rank 1 in the dp one. The
    skipped call is named; which finished rank is rank 3's partner the stacks cannot say."""
    f = tmp_path / "train.py"
    f.write_text(MESH)
    at = str(f)

    def at_line(rank: int, op: str, line: int) -> RankState:
        frames = [
            Frame(function=op, file=C10D, line=100),
            Frame(function="train", file=at, line=line),
        ]
        return classify(frames, pid=1000 + rank, rank=rank, active=False)

    found = report_of(
        at_line(0, "barrier", 9),
        at_line(1, "all_reduce", 8),
        at_line(2, "barrier", 9),
        at_line(3, "all_reduce", 7),
    ).hypotheses
    top = found[0]
    assert top.cause_id == "hang.mismatched_collective", found
    assert top.ranks == [0, 2] and top.location and top.location.line == 7, [
        (h.cause_id, h.confidence, h.ranks, h.summary) for h in found
    ]
    assert "hang.uneven_inputs" in top.summary and "step count" in top.summary
    assert all(h.confidence < 0.8 for h in found)


IF_ELSE = """\
import torch.distributed as dist


def train(rank, batches, x):
    for step in batches:
        if rank == 1 and step == 3:
            dist.broadcast(x, src=1)
        else:
            dist.all_reduce(x)
    dist.barrier()
"""


def test_of_an_if_and_its_else_the_stacks_name_the_rank_the_test_picks_out(
    tmp_path: Path,
) -> None:
    f = tmp_path / "train.py"
    f.write_text(IF_ELSE)
    at = str(f)
    top = report_of(state(0, "all_reduce", at, 9), state(1, "broadcast", at, 7)).hypotheses[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [1] and top.location and top.location.line == 7


RESIZED = """\
import torch
import torch.distributed as dist


def train(rank, batches, loss):
    for step in batches:
        metrics = [loss, float(step)]
        if rank == 1 and step == 3:
            metrics.append(1.0)
        dist.all_reduce(torch.tensor(metrics))
    dist.barrier()
"""


def test_every_rank_in_one_collective_whose_input_a_rank_branch_grows(tmp_path: Path) -> None:
    f = tmp_path / "train.py"
    f.write_text(RESIZED)
    at = str(f)
    found = report_of(*(state(r, "all_reduce", at, 10) for r in range(4))).hypotheses
    top = found[0]
    assert top.cause_id == "hang.shape_mismatch" and top.ranks == []
    assert top.location and top.location.line == 10
    assert "changes the call's input at line 9" in top.summary


def test_a_branch_that_changes_another_variable_is_not_a_shape_mismatch(tmp_path: Path) -> None:
    f = tmp_path / "train.py"
    f.write_text(RESIZED.replace("metrics.append(1.0)", "print(metrics)"))
    found = report_of(*(state(r, "all_reduce", str(f), 10) for r in range(4))).hypotheses
    assert "hang.shape_mismatch" not in {h.cause_id for h in found}
