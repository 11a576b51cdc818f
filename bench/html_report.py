"""How big the HTML report of a 4,096-rank hang is and how long it takes to render, against
the markdown report of the same Report.

The report is synthetic but built the way the engine builds one: evidence items with the
payloads the tools write (each rank's classified stack, its NCCL watchdog line, the Flight
Recorder's overview and stuck group with its outlier, one nvidia-smi gap per node), rank
groups from `triage.grouping.group_ranks`, and two close hypotheses. 4,095 ranks on
node[001-512] wait in all_reduce seq 1234; rank 3490 (local rank 2 of node437) finished
seq 1233 and waits for a shard file. The markdown render is the baseline, in this run; the
ratio is what compares across machines. Target: the page under 5 MB (its load time in a
browser is tests/test_html_report.py's to measure, with a real Chromium).

    python bench/html_report.py [--nodes 512] [--ranks-per-node 8] [--culprit-node 437]
                                [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from triage.grouping import group_ranks
from triage.models import Evidence, Finding, Gap, Location, Report, ToolResult, ToolStatus
from triage.observations import (
    Frame,
    FROp,
    FROutlier,
    FROverview,
    FRSide,
    FRStuckGroup,
    LogSignal,
    RankActivity,
    RankState,
)
from triage.readers.flight_recorder.evidence_payloads import outlier_payload, summarize
from triage.registry import EvidenceSet
from triage.render.html import render_html
from triage.render.markdown import render_markdown
from triage.text import format_nodes, format_ranks

TARGET_MB = 5.0
TRAIN = "/job/train.py"
C10D = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"
SEQ = 1234
LOCAL_CULPRIT = 2
BASE_PID = 40_000


def node_name(number: int) -> str:
    return f"node{number:03d}"


def culprit_of(ranks_per_node: int, culprit_node: int) -> int:
    return (culprit_node - 1) * ranks_per_node + LOCAL_CULPRIT


def synthetic_report(nodes: int = 512, ranks_per_node: int = 8, culprit_node: int = 437) -> Report:
    """A whole job's hang report: every rank's stack and log line, Flight Recorder dumps of
    all ranks, one rank (local rank 2 of `culprit_node`) not in the all_reduce."""
    world = nodes * ranks_per_node
    culprit = culprit_of(ranks_per_node, culprit_node)
    evidence: list[Evidence] = []
    for rank in range(world):
        node = node_name(rank // ranks_per_node + 1)
        evidence.append(_stack(rank, node, rank == culprit))
        if rank != culprit:
            evidence.append(_watchdog_line(rank, node))
    evidence += _flight_recorder(world, culprit)
    return Report(
        symptom="hang",
        playbook="hang",
        targets={"collections": [f"/shared/triage/{format_nodes(_names(nodes))}"]},
        hypotheses=_hypotheses(world, culprit),
        rank_groups=group_ranks(EvidenceSet(evidence)),
        evidence=evidence,
        tool_runs=[
            ToolResult(tool="read_collections", status=ToolStatus.ok, duration_s=1.2),
            ToolResult(tool="read_flight_recorder", status=ToolStatus.ok, duration_s=3.4),
        ],
        gaps=[
            Gap(
                source=f"{name} nvidia-smi",
                reason="nvidia-smi not found: GPUs, GPU processes and topology not checked",
                tool="check_environment",
            )
            for name in _names(nodes)
        ],
        next_steps=[
            f"Fix for the top hypothesis: {_FIX.format(rank=culprit)}",
            "hang.rank_not_in_collective and hang.uneven_inputs are close calls; gather more "
            "evidence before acting.",
        ],
        notes=[
            f"merged {nodes} collections from {format_nodes(_names(nodes))}: ranks 0-{world - 1}"
        ],
    )


_FIX = (
    "Make rank {rank} reach the collective at /job/train.py:32 in average_gradients: move the "
    "wait for the shard file so every rank does it or it ends before the collective."
)


def _names(nodes: int) -> list[str]:
    return [node_name(n) for n in range(1, nodes + 1)]


def _frames(culprit: bool) -> list[Frame]:
    """Innermost first, as py-spy gives them."""
    if culprit:
        inner = [Frame(function="wait_for_shard", file=TRAIN, line=38)]
        inner.append(Frame(function="batches", file=TRAIN, line=48))
        caller = Frame(function="main", file=TRAIN, line=59)
    else:
        inner = [Frame(function="all_reduce", file=C10D, line=2950)]
        inner.append(Frame(function="average_gradients", file=TRAIN, line=32))
        caller = Frame(function="main", file=TRAIN, line=63)
    return [*inner, caller, Frame(function="<module>", file=TRAIN, line=71)]


def _stack(rank: int, node: str, culprit: bool) -> Evidence:
    frames = _frames(culprit)
    user = frames[0] if culprit else frames[1]
    state = RankState(
        rank=rank,
        pid=BASE_PID + rank,
        host=node,
        node=node,
        activity=RankActivity.idle if culprit else RankActivity.collective,
        op=None if culprit else "all_reduce",
        group=None if culprit else "default",
        detail="idle outside any collective (sleep, I/O or input)" if culprit else "in all_reduce",
        user_frame=user,
        call_path=[f for f in reversed(frames) if f.file == TRAIN],
        frames=frames,
        thread="MainThread",
    )
    return Evidence(
        id=f"stack:rank{rank}",
        kind=RankState.EVIDENCE_KIND,
        source=f"pid:{state.pid}",
        rank=rank,
        summary=f"rank {rank}: {state.describe()} at {user.location()}",
        data=state.model_dump(mode="json"),
    )


def _watchdog_line(rank: int, node: str) -> Evidence:
    path, line = f"/shared/logs/{node}/rank{rank}.log", 4210
    text = (
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={SEQ}, "
        "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out."
    )
    signal = LogSignal(
        signature="hang.watchdog_timeout",
        text=text,
        path=path,
        line=line,
        rank=rank,
        host=node,
        fields={"seq": str(SEQ), "op": "ALLREDUCE"},
    )
    return Evidence(
        id=f"log:rank{rank}.log:{line}:{signal.signature}",
        kind=LogSignal.EVIDENCE_KIND,
        source=f"{path}:{line}",
        rank=rank,
        summary=f"{signal.signature}: {text}",
        data=signal.model_dump(exclude_defaults=True),
        excerpt=text,
    )


def _op(seq: int, done: bool) -> FROp:
    state = "completed" if done else "started"
    return FROp(
        op="all_reduce",
        seq=seq,
        group="0",
        state=state,
        done=done,
        input_sizes=[[1048576]],
        input_dtypes=["Float"],
        output_sizes=[[1048576]],
        location=Location(file=TRAIN, line=32, function="average_gradients"),
        text=f"all_reduce [1048576 Float] seq {seq} ({'finished' if done else 'started'})",
    )


def _flight_recorder(world: int, culprit: int) -> list[Evidence]:
    """What read_flight_recorder writes for these dumps: the overview, the stuck group, and
    the outlier a finding cites."""
    waiting = [rank for rank in range(world) if rank != culprit]
    point = FRStuckGroup(
        group="0",
        desc="default_pg",
        members=world,
        membership="config",
        world=world,
        seq=SEQ,
        sides=[
            FRSide(state="waiting", ranks=waiting, op=_op(SEQ, done=False)),
            FRSide(state="idle", ranks=[culprit], op=_op(SEQ - 1, done=True)),
        ],
        root=True,
    )
    overview = FROverview(
        dumps=world,
        ranks=format_ranks(list(range(world))),
        world=world,
        versions=["2.10"],
        backends=["nccl"],
        groups=1,
        stuck_groups=1,
        entries=world * 2000,
        files=[f"/shared/fr/nccl_trace_rank_{rank}" for rank in range(3)],
    )
    outlier = point.sides[1]
    return [
        Evidence(
            id="fr:overview",
            kind=FROverview.EVIDENCE_KIND,
            source="/shared/fr",
            summary=f"Flight Recorder: {world} rank dumps (nccl, format 2.10), group 0 stuck at "
            f"seq {SEQ}",
            data=overview.model_dump(exclude_defaults=True),
        ),
        Evidence(
            id=point.evidence_id(),
            kind=FRStuckGroup.EVIDENCE_KIND,
            source="/shared/fr",
            summary=summarize(point),
            data=point.model_dump(exclude_defaults=True),
        ),
        Evidence(
            id=point.side_evidence_id(outlier),
            kind=FROutlier.EVIDENCE_KIND,
            source=f"/shared/fr/nccl_trace_rank_{culprit}",
            rank=culprit,
            summary=f"group 0 seq {SEQ}: {outlier.describe()}",
            data=outlier_payload(point, outlier).model_dump(exclude_defaults=True),
        ),
    ]


def _hypotheses(world: int, culprit: int) -> list[Finding]:
    """Two close causes for the culprit (what separates them is in `confirm`), then the
    timeout every other rank logged."""
    shard = Location(file=TRAIN, line=38, function="wait_for_shard")
    cited = [f"stack:rank{culprit}", f"fr:group0:seq{SEQ}:idle:{culprit}"]
    return [
        Finding(
            rule_id="stacks.rank_not_in_collective",
            cause_id="hang.rank_not_in_collective",
            title=f"rank {culprit} is not in the collective its peers wait in",
            summary=f"{world - 1:,} ranks wait in all_reduce seq {SEQ} at {TRAIN}:32, but rank "
            f"{culprit} finished seq {SEQ - 1} and waits for a shard file at {shard}.",
            ranks=[culprit],
            location=shard,
            other_locations=[Location(file=TRAIN, line=32, function="average_gradients")],
            confidence=0.85,
            evidence=cited,
            fix=_FIX.format(rank=culprit),
            confirm=f"rank {culprit}'s stack stays in wait_for_shard across two dumps",
        ),
        Finding(
            rule_id="fr.uneven_inputs",
            cause_id="hang.uneven_inputs",
            title=f"rank {culprit} ran out of batches before its peers",
            summary=f"rank {culprit} left the training loop one step early.",
            ranks=[culprit],
            location=Location(file=TRAIN, line=48, function="batches"),
            confidence=0.75,
            evidence=cited,
            fix="Give every rank the same number of batches (drop_last, or Join).",
            confirm=f"rank {culprit}'s loader is exhausted while its peers still have batches",
        ),
        Finding(
            rule_id="logs.watchdog_timeout",
            cause_id="hang.collective_timeout",
            title=f"{world - 1:,} ranks timed out in all_reduce seq {SEQ}",
            summary="The NCCL watchdog of every rank but one fired after 600 s.",
            ranks=[rank for rank in range(world) if rank != culprit],
            confidence=0.3,
            evidence=["log:rank0.log:4210:hang.watchdog_timeout"],
        ),
    ]


def timed(work: Callable[[], str], repeat: int) -> tuple[float, str]:
    """The median seconds of `repeat` runs, and the output."""
    seconds = []
    out = ""
    for _ in range(repeat):
        started = time.perf_counter()
        out = work()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--culprit-node", type=int, default=437)
    parser.add_argument("--repeat", type=int, default=5, help="renders of each (median)")
    args = parser.parse_args()
    started = time.perf_counter()
    report = synthetic_report(args.nodes, args.ranks_per_node, args.culprit_node)
    built = time.perf_counter() - started
    first, _ = timed(lambda: render_html(report), 1)  # compiles the template
    html_s, page = timed(lambda: render_html(report), args.repeat)
    markdown_s, text = timed(lambda: render_markdown(report), args.repeat)
    size_mb = len(page.encode()) / 1e6
    ranks = args.nodes * args.ranks_per_node
    print(f"report               {ranks:,} ranks on {args.nodes} nodes, built in {built:.2f} s")
    print(f"HTML page            {size_mb:.2f} MB (markdown {len(text.encode()) / 1e6:.2f} MB)")
    print(f"HTML render          {html_s * 1000:.0f} ms (first call {first * 1000:.0f} ms)")
    print(f"markdown render      {markdown_s * 1000:.0f} ms")
    print(f"ratio                {html_s / max(markdown_s, 1e-9):.1f}x markdown")
    met = size_mb < TARGET_MB
    print(f"target               page < {TARGET_MB:.0f} MB: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
