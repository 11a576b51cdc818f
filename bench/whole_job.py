"""How long `triage hang --collections` takes on a whole 4,096-rank job, against 8 ranks.

The documents are made from a real one: `triage collect` on a real hung 4-rank gloo job
on this host (rank 2 polls for a shard file while ranks 0, 1 and 3 wait in the gradient
all_reduce), kept in tests/fixtures/collections/ (`--record` records it again). Its
evidence items (processes, environment, stacks with their real frames and excerpts, the
host's facts, the gap) are replicated to 512 nodes of 8 ranks by rewriting rank, pid,
node and ids; the culprit is local rank 2 of node437. Every node's ranks have the same
pids, as on identical nodes, so ids collide across nodes as they do in real jobs.

The baseline is the same pipeline on 8 ranks of one node, in this run; the ratios are
what compare across machines. Measured: `triage hang --collections DIR` end to end as a
subprocess (its wall and CPU time and peak resident memory, from wait4), then in this
process the engine's phases in CPU seconds (read + merge, rules, grouping, ranking and
next steps, terminal render, JSON render: a shared machine's load does not count), the
verdict (the planted culprit and its node), and the terminal report's height at the
widest the CLI renders (120 columns). Targets at 4,096 ranks: the pipeline (every phase
but the JSON render) under 2 s, the CLI under 500 MB, the report within one 50-line screen.

    python bench/whole_job.py [--nodes 512] [--ranks-per-node 8] [--culprit-node 437]
                              [--repeat 3] [--record] [--show]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from unittest.mock import patch

from rich.console import Console

from triage import engine
from triage.engine import job_targets
from triage.grouping import group_ranks
from triage.models import Report
from triage.playbooks import load_playbooks
from triage.plugins import load_all, rule_families
from triage.registry import run_rules
from triage.render import render_json
from triage.render.terminal import print_report

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "tests" / "fixtures" / "collections" / "rank_not_in_collective.json"
SCENARIO = "rank_not_in_collective"
CAUSE = "hang.rank_not_in_collective"
WAITER, CULPRIT = 0, 2  # the recorded job's ranks: one waits in all_reduce, one polls
SCREEN_COLUMNS, SCREEN_LINES = 120, 50
TARGET_SECONDS, TARGET_MB = 2.0, 500.0
T = TypeVar("T")


@dataclass(frozen=True)
class Identity:
    """What makes an evidence item one rank's: rewritten to make it another's."""

    pid: int
    rank: int
    local_rank: int
    world: int
    local_world: int
    host: str


@dataclass(frozen=True)
class Job:
    """A whole job made from the recorded document: its size, and where the culprit is."""

    recorded: dict[str, Any]
    nodes: int
    ranks_per_node: int
    culprit_node: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def culprit(self) -> int:
        return (self.culprit_node - 1) * self.ranks_per_node + CULPRIT

    @property
    def culprit_name(self) -> str:
        return node_name(self.culprit_node)


def node_name(number: int) -> str:
    return f"node{number:03d}"


def record(path: Path) -> None:
    """`triage collect` on a real hung gloo job of this host, written to `path`."""
    from triage.scenarios import RankJob

    with RankJob(SCENARIO, world_size=4) as job:
        job.wait_until_stalled()
        pids = [str(pid) for pid in job.pids]
        collect = [sys.executable, "-m", "triage", "collect", "--node-name", node_name(1)]
        subprocess.run([*collect, "--pids", *pids, "-o", str(path)], check=True)


def _rewrite(value: Any, old: Identity, new: Identity) -> Any:
    """The value with every mention of `old` (fields, ids, summaries, excerpts) as `new`."""
    fields: dict[str, tuple[object, object]] = {
        "pid": (old.pid, new.pid),
        "rank": (old.rank, new.rank),
        "local_rank": (old.local_rank, new.local_rank),
        "world_size": (old.world, new.world),
        "local_world_size": (old.local_world, new.local_world),
        "host": (old.host, new.host),
        "RANK": (str(old.rank), str(new.rank)),
        "LOCAL_RANK": (str(old.local_rank), str(new.local_rank)),
        "WORLD_SIZE": (str(old.world), str(new.world)),
        "LOCAL_WORLD_SIZE": (str(old.local_world), str(new.local_world)),
    }
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            was, now = fields.get(key, (None, None))
            out[key] = now if was is not None and item == was else _rewrite(item, old, new)
        return out
    if isinstance(value, list):
        return [_rewrite(item, old, new) for item in value]
    if not isinstance(value, str):
        return value
    value = re.sub(rf"\b{re.escape(old.host)}\b", new.host, value)
    if old.rank < 0:  # a host's own item: no rank or pid of its own
        return value
    value = re.sub(rf"(?<!\d){old.pid}(?!\d)", str(new.pid), value)
    value = value.replace(f"LOCAL_RANK={old.local_rank},", f"LOCAL_RANK={new.local_rank},")

    def ranked(match: re.Match[str]) -> str:
        world = f"/{new.world}" if match[2] else ""
        return f"{match[1]}{new.rank}{world}"

    return re.sub(rf"\b(rank ?){old.rank}(/{old.world})?\b", ranked, value)


def job_of(nodes: int, ranks_per_node: int, culprit_node: int) -> Job:
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    return Job(recorded, nodes, ranks_per_node, min(culprit_node, nodes))


def documents(job: Job) -> Iterator[dict[str, Any]]:
    """Every node's document: the recorded items of a waiting rank for each local rank,
    the culprit's for local rank 2 of the culprit's node, the host's facts and gaps."""
    items = job.recorded["evidence"]
    pids = {item["rank"]: item["data"]["pid"] for item in items if item["kind"] == "process"}
    world, host = len(pids), job.recorded["host"]
    by_kind_rank = {(item["kind"], item["rank"]): item for item in items}
    for number in range(1, job.nodes + 1):
        name = node_name(number)
        first = (number - 1) * job.ranks_per_node
        evidence: list[dict[str, Any]] = []
        for item in items:
            if item["rank"] is None:
                evidence.append(_rewrite(item, _host(host), _host(name)))
                continue
            if item["rank"] != WAITER:
                continue  # one template per kind: the waiting rank's (the culprit's below)
            for local in range(job.ranks_per_node):
                rank = first + local
                mine = CULPRIT if rank == job.culprit else WAITER
                old = Identity(pids[mine], mine, mine, world, world, host)
                new = Identity(
                    pids[WAITER] + local, rank, local, job.ranks, job.ranks_per_node, name
                )
                evidence.append(_rewrite(by_kind_rank[(item["kind"], mine)], old, new))
        document = _rewrite(job.recorded, _host(host), _host(name))
        document.update(
            host=name,
            node=name,
            ranks=list(range(first, first + job.ranks_per_node)),
            evidence=evidence,
            selection={
                **job.recorded["selection"],
                "pids": [pids[WAITER] + local for local in range(job.ranks_per_node)],
            },
            collected_at=datetime.now(UTC).isoformat(),
        )
        yield document


def _host(host: str) -> Identity:
    """An identity that rewrites only the host name."""
    return Identity(-1, -1, -1, -1, -1, host)


def write_job(job: Job, folder: Path) -> None:
    """One file per node, written as made: this process holds no job while it measures."""
    for document in documents(job):
        path = folder / f"{document['node']}.json"
        path.write_text(json.dumps(document), encoding="utf-8")


@dataclass
class Run:
    """One `triage hang --collections DIR` as a user runs it."""

    wall_s: float
    cpu_s: float
    peak_mb: float
    output: str


def end_to_end(folder: Path) -> Run:
    """Wall and CPU time and peak resident memory of the CLI process alone (wait4 reports
    that child's own usage, not the recorded job's ranks)."""
    env = dict(os.environ, COLUMNS=str(SCREEN_COLUMNS))
    cmd = [sys.executable, "-m", "triage", "hang", "--collections", str(folder)]
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"triage hang --collections {folder} exited {proc.returncode}")
    cpu = usage.ru_utime + usage.ru_stime
    return Run(wall, cpu, usage.ru_maxrss / 1024, text)  # ru_maxrss is in KiB on Linux


@dataclass
class Measured:
    """The medians of a job's runs; phases and the end to end time in CPU seconds."""

    runs: list[Run]
    phases: dict[str, float]
    report: Report

    @property
    def pipeline(self) -> float:
        """What `triage hang` does after start-up for the terminal report."""
        return sum(s for name, s in self.phases.items() if name != "JSON render")

    @property
    def wall_s(self) -> float:
        return statistics.median(run.wall_s for run in self.runs)

    @property
    def cpu_s(self) -> float:
        return statistics.median(run.cpu_s for run in self.runs)

    @property
    def peak_mb(self) -> float:
        return max(run.peak_mb for run in self.runs)

    @property
    def screen(self) -> list[str]:
        return self.runs[0].output.splitlines()


class Phases:
    """CPU seconds per phase of one in-process run: the engine's own calls, timed where the
    engine makes them (rules and grouping share one parse of the payloads, as in
    `triage hang`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def timed(self, name: str, work: Callable[[], T]) -> T:
        started = time.process_time()
        value = work()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.process_time() - started
        return value

    def wrap(self, name: str, func: Callable[..., Any], lazy: bool = False) -> Callable[..., Any]:
        """`func` timed; a generator's time is the time to run it to the end."""

        def timed_call(*args: Any) -> Any:
            if lazy:
                return iter(self.timed(name, lambda: list(func(*args))))
            return self.timed(name, lambda: func(*args))

        return timed_call


def in_process(folder: Path) -> tuple[dict[str, float], Report]:
    """`triage hang --collections DIR` in this process, phase by phase."""
    playbook = load_playbooks()["hang"]
    load_all(None, rule_families(playbook.causes))
    phases = Phases()
    targets = job_targets(collections=[str(folder)])
    report = phases.timed("read + merge", lambda: engine.gather(playbook, targets))
    with (
        patch.object(engine, "run_rules", phases.wrap("rules", run_rules, lazy=True)),
        patch.object(engine, "group_ranks", phases.wrap("grouping", group_ranks)),
    ):
        report = phases.timed("decide", lambda: engine.decide(playbook, report))
    seconds = phases.seconds
    seconds["ranking, next steps"] = seconds.pop("decide") - seconds["rules"] - seconds["grouping"]
    screen = Console(file=io.StringIO(), width=SCREEN_COLUMNS, color_system=None)
    phases.timed("terminal render", lambda: print_report(report, screen))
    phases.timed("JSON render", lambda: render_json(report))
    return seconds, report


def measure(job: Job, repeat: int) -> Measured:
    """The CLI `repeat` times, then the phases `repeat` times; the last run's report kept."""
    with tempfile.TemporaryDirectory(prefix="whole-job-") as tmp:
        write_job(job, Path(tmp))
        runs = [end_to_end(Path(tmp)) for _ in range(repeat)]
        timings = []
        for _ in range(repeat):
            report = None  # the run before's report is not alive while this one runs
            gc.collect()
            phases, report = in_process(Path(tmp))
            timings.append(phases)
    medians = {name: statistics.median(t[name] for t in timings) for name in timings[0]}
    assert report is not None
    return Measured(runs, medians, report)


def verdict(job: Job, report: Report) -> tuple[str, bool]:
    """The top hypothesis, and whether it is the planted culprit on its node."""
    top = report.verdict
    if top is None:
        return "no hypothesis", False
    nodes = sorted({n for g in report.rank_groups if job.culprit in g.ranks for n in g.nodes})
    right = top.cause_id == CAUSE and top.ranks == [job.culprit] and nodes == [job.culprit_name]
    where = f"{top.location.file.rpartition('/')[2]}:{top.location.line}" if top.location else "?"
    text = f"{top.cause_id} ranks {top.ranks} on {','.join(nodes) or '?'} at {where}"
    return text, right


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--culprit-node", type=int, default=437)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (median)")
    parser.add_argument(
        "--record", action="store_true", help=f"record {RECORDED.name} again from a live job"
    )
    parser.add_argument("--show", action="store_true", help="print the large job's report")
    args = parser.parse_args()
    if args.record:
        with tempfile.TemporaryDirectory() as tmp:
            record(Path(tmp) / RECORDED.name)
            shutil.copy(Path(tmp) / RECORDED.name, RECORDED)
    small = job_of(1, args.ranks_per_node, 1)
    large = job_of(args.nodes, args.ranks_per_node, args.culprit_node)
    base, big = measure(small, args.repeat), measure(large, args.repeat)
    print(
        f"job                  {large.ranks} ranks on {large.nodes} nodes; baseline {small.ranks}"
        f" ranks on 1 node; median of {args.repeat} runs each"
    )
    print(f"{'':<20} {'baseline':>9} {'large':>9} {'ratio':>7}")
    rows = [(name, base.phases[name], big.phases[name]) for name in big.phases]
    rows += [("pipeline (terminal)", base.pipeline, big.pipeline)]
    rows += [("CLI, CPU", base.cpu_s, big.cpu_s), ("CLI, wall", base.wall_s, big.wall_s)]
    for name, before, after in rows:
        print(f"{name:<20} {before:8.3f}s {after:8.3f}s {after / max(before, 1e-6):6.1f}x")
    ratio = big.peak_mb / base.peak_mb
    print(f"{'peak memory (CLI)':<20} {base.peak_mb:7.0f}MB {big.peak_mb:7.0f}MB {ratio:6.1f}x")
    ok = True
    for job, run in (small, base), (large, big):
        text, right = verdict(job, run.report)
        ok &= right
        print(f"verdict, {job.ranks:>4} ranks  {text} ({'right' if right else 'WRONG'})")
    print(
        f"terminal report      {len(base.screen)} lines (baseline), {len(big.screen)} lines"
        f" ({SCREEN_COLUMNS} columns; one screen is {SCREEN_LINES} lines)"
    )
    if args.show:
        print("\n".join(big.screen))
    met = big.pipeline < TARGET_SECONDS and big.peak_mb < TARGET_MB
    fits = len(big.screen) <= SCREEN_LINES
    print(
        f"targets              pipeline < {TARGET_SECONDS:.0f} s and < {TARGET_MB:.0f} MB:"
        f" {'met' if met else 'MISSED'}; one screen: {'met' if fits else 'MISSED'}"
    )
    return 0 if ok and met and fits else 1


if __name__ == "__main__":
    raise SystemExit(main())
