"""Flight Recorder dumps: safe, fast reading and per-group alignment that names the culprit.

Real dumps of hung 4-rank gloo jobs (tests/fixtures/flight_recorder, recorded by record.py
there with torch's own dump call) cover what gloo can show; dumps written by
tests.synthetic_fr, which follows the schema and pickle layout torch's NCCL
backend writes, cover started/completed states, send/recv, missing files and scale.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, triage_cli
from tests.synthetic_fr import (
    FAULT_LINE,
    Call,
    Group,
    Job,
    encode_json,
    encode_pickle,
    history,
    plant,
    rank_dump,
    write_dumps,
)
from triage.cli import app
from triage.models import Evidence, Location
from triage.observations import FROp, FRSide, FRStuckGroup
from triage.readers import flight_recorder as fr
from triage.readers.safe_pickle import load_untrusted
from triage.registry import REGISTRY

FIXTURES = REPO / "tests" / "fixtures" / "flight_recorder"
REAL = sorted(p.parent for p in FIXTURES.glob("*/expected.json"))
MEMORY = REPO / "tests" / "fixtures" / "memory"


def expected(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "expected.json").read_text())
    return data


def dump_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name != "expected.json")


def analyze(*paths: Path) -> dict[str, Any]:
    """`triage analyze PATH... --json`, in-process."""
    result = CliRunner().invoke(app, ["analyze", *map(str, paths), "--json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def run_tool(**params: Any) -> Any:
    return REGISTRY.run("read_flight_recorder", params)


def findings(run: Any) -> dict[str, Any]:
    """The hang rules applied to a tool run's evidence: cause -> best finding."""
    from triage.engine import rank
    from triage.registry import EvidenceSet, run_rules, select

    found = [f for _, f in run_rules(select(["hang.*"]), EvidenceSet(run.evidence))]
    return {f.cause_id: f for f in rank(found)}


def generated(tmp_path: Path, kind: str, *, ranks: int = 8, entries: int = 60, **kw: Any) -> Path:
    job, calls, planted = plant(kind, ranks, entries, 3)
    skip = planted.culprits if kind == "rank_exited" else ()
    write_dumps(tmp_path / kind, job, calls, skip=skip, **kw)
    return tmp_path / kind


# --- real gloo dumps ---------------------------------------------------------------------


def test_real_fixtures_cover_every_fault_gloo_can_show() -> None:
    causes = {expected(d)["cause_id"] for d in REAL}
    assert causes == {
        "hang.mismatched_collective",
        "hang.rank_not_in_collective",
        "hang.shape_mismatch",
        "hang.subgroup_mismatch",
        "hang.uneven_inputs",
    }
    for folder in REAL:  # recorded by record.py: its markers still sit on the recorded lines
        want = expected(folder)
        source = (FIXTURES / "record.py").read_text().splitlines()
        assert "# fr: " in source[want["line"] - 1], folder.name


@pytest.mark.parametrize("folder", REAL, ids=lambda p: p.name)
def test_real_gloo_dumps_name_cause_culprits_and_line(folder: Path) -> None:
    want = expected(folder)
    run = run_tool(
        pickle_files=[str(p) for p in dump_files(folder) if p.suffix == ".pickle"],
        json_files=[str(p) for p in dump_files(folder) if p.suffix == ".json"],
    )
    assert run.result.status == "ok", run.result.error
    best = max(findings(run).values(), key=lambda f: f.confidence)
    assert best.cause_id == want["cause_id"], best
    assert best.ranks == want["culprits"]
    if folder.name.endswith("_json"):  # JSON dumps carry no stacks
        assert best.location is None
    else:
        assert best.location is not None
        assert Path(best.location.file).name == want["file"]
        assert best.location.line == want["line"]
        assert [loc.line for loc in best.other_locations] == [want["waiting_line"]]


def test_analyze_names_cause_culprit_and_user_line_end_to_end() -> None:
    folder = FIXTURES / "mismatched_collective"
    report = analyze(folder)
    top = report["hypotheses"][0]
    assert top["cause_id"] == "hang.mismatched_collective"
    assert top["ranks"] == [0]
    assert top["location"]["line"] == expected(folder)["line"]
    assert report["symptom"] == "hang"
    assert "broadcast" in top["summary"] and "all_reduce" in top["summary"]
    assert not report["gaps"]  # expected.json is skipped without a word


def test_a_rank_that_ran_out_of_batches_is_uneven_inputs_not_a_mismatch() -> None:
    """Rank 3's barrier after the loop meets the others' gradient all_reduce at one seq."""
    folder = FIXTURES / "uneven_inputs"
    report = analyze(folder)
    top = report["hypotheses"][0]
    assert (top["cause_id"], top["ranks"]) == ("hang.uneven_inputs", [3])
    assert top["location"]["line"] == expected(folder)["line"]
    assert [loc["line"] for loc in top["other_locations"]] == [expected(folder)["waiting_line"]]
    assert "DistributedSampler" in top["fix"] and "barrier" in top["summary"]
    assert "hang.mismatched_collective" not in {h["cause_id"] for h in report["hypotheses"]}


TRAIN = """\
import torch.distributed as dist


def train(loader, rank):
    for batch in loader:
        dist.all_reduce(batch)
        if rank == 0:
            dist.barrier()
    dist.barrier()


def evaluate():
    dist.barrier()
"""


def side(state: str, ranks: list[int], op: str, file: Path | str, line: int) -> FRSide:
    location = Location(file=str(file), line=line, function="train")
    return FRSide(
        state=state,
        ranks=ranks,
        op=FROp(op=op, seq=9, group="0", state="scheduled", location=location),
    )


def test_left_the_loop_reads_the_source(tmp_path: Path) -> None:
    from triage.rules.fr._stuck_groups import left_the_loop

    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    in_loop = side("waiting", [0, 1, 2], "all_reduce", train, 6)
    after = side("other_op", [3], "barrier", train, 9)
    branch = side("other_op", [0], "barrier", train, 8)
    elsewhere = side("other_op", [3], "barrier", train, 13)
    assert left_the_loop(after, in_loop) is True
    assert left_the_loop(in_loop, after) is False  # the loop's collective is not past the loop
    assert left_the_loop(branch, in_loop) is False  # a rank-dependent branch inside the loop
    assert left_the_loop(elsewhere, in_loop) is None  # another function: the lines cannot tell
    gone = side("other_op", [3], "barrier", tmp_path / "gone.py", 9)
    assert left_the_loop(gone, side("waiting", [0], "all_reduce", tmp_path / "gone.py", 6)) is None


def test_a_barrier_in_a_rank_branch_is_a_mismatch_one_after_the_loop_uneven(tmp_path: Path) -> None:
    from triage.registry import EvidenceSet, run_rules, select

    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    loop = side("waiting", [1, 2, 3], "all_reduce", train, 6)

    def causes(normal: FRSide, odd: FRSide) -> dict[str, tuple[list[int], float]]:
        point = FRStuckGroup(
            group="0", members=4, membership="world", world=4, seq=9, root=True, sides=[normal, odd]
        )
        item = Evidence(
            id=point.evidence_id(), kind="fr_stuck", source="t", summary="", data=point.model_dump()
        )
        found = run_rules(select(["hang.*"]), EvidenceSet([item]))
        return {f.cause_id: (f.ranks, f.confidence) for _, f in found}

    branched = causes(loop, side("other_op", [0], "barrier", train, 8))
    assert branched.keys() == {"hang.mismatched_collective"}
    after = causes(loop, side("other_op", [0], "barrier", train, 9))
    assert after == {"hang.uneven_inputs": ([0], 0.85)}
    # the majority ran out: the rank still in the loop is the outlier, named as the live rule does
    still_in = loop.model_copy(update={"state": "other_op", "ranks": [0]})
    ahead = causes(side("waiting", [1, 2, 3], "barrier", train, 9), still_in)
    assert ahead == {"hang.uneven_inputs": ([0], 0.8)}
    unread = causes(loop, side("other_op", [0], "barrier", tmp_path / "gone.py", 9))
    assert unread["hang.uneven_inputs"][1] < unread["hang.mismatched_collective"][1]


def test_most_of_a_group_outside_every_recorded_collective_is_not_a_confident_culprit(
    tmp_path: Path,
) -> None:
    """Three of four ranks never enqueued the collective the fourth waits in: they likely
    wait in something the recorder does not record (new_group, a store barrier)."""
    from triage.registry import EvidenceSet, run_rules, select

    train = tmp_path / "train.py"
    train.write_text(TRAIN)

    def verdict(idle: list[int], waiting: list[int]) -> tuple[list[int], float]:
        point = FRStuckGroup(
            group="0",
            members=4,
            membership="world",
            world=4,
            seq=9,
            root=True,
            sides=[
                side("waiting", waiting, "all_reduce", train, 6),
                FRSide(state="idle", ranks=idle),
            ],
        )
        item = Evidence(
            id=point.evidence_id(), kind="fr_stuck", source="t", summary="", data=point.model_dump()
        )
        found = run_rules(select(["hang.rank_not_in_collective"]), EvidenceSet([item]))
        return next((f.ranks, f.confidence) for _, f in found)

    assert verdict([3], [0, 1, 2]) == ([3], 0.85)
    ranks, confidence = verdict([0, 1, 2], [3])
    assert ranks == [0, 1, 2] and confidence < 0.5


def test_hang_playbook_reads_a_flight_recorder_dir() -> None:
    """What `triage hang --flight-recorder DIR` hands the engine."""
    from triage.engine import follow
    from triage.playbooks import get_playbook

    folder = FIXTURES / "rank_not_in_collective"
    report = follow(get_playbook("hang"), {"flight_recorder_dir": str(folder)})
    assert [r.tool for r in report.tool_runs] == ["read_flight_recorder"]
    assert report.verdict is not None
    assert (report.verdict.cause_id, report.verdict.ranks) == ("hang.rank_not_in_collective", [2])
    assert not report.gaps  # expected.json is not named like the dumps


@pytest.mark.parametrize("folder", REAL, ids=lambda p: p.name)
def test_flight_recorder_alone_groups_every_rank_once(folder: Path) -> None:
    """No stacks: the report's ranks-by-state table comes from the stuck points' sides."""
    want = expected(folder)
    groups = analyze(folder)["rank_groups"]
    assert sorted(r for g in groups for r in g["ranks"]) == list(range(want["world_size"]))
    culprit = next(g for g in groups if want["culprits"][0] in g["ranks"])
    waiting = next(g for g in groups if not set(want["culprits"]) & set(g["ranks"]))
    assert culprit["state"] != waiting["state"] and culprit["detail"] and waiting["detail"]
    if folder.name.endswith("_json"):  # JSON dumps carry no stacks
        assert culprit["location"] is None and waiting["location"] is None
    else:
        assert (culprit["location"]["line"], waiting["location"]["line"]) == (
            want["line"],
            want["waiting_line"],
        )


def test_a_rank_is_grouped_by_the_op_it_waits_in_across_groups() -> None:
    """Rank 3 holds up group 1 while it waits in group 0's all_reduce with rank 0: one line."""
    groups = analyze(FIXTURES / "subgroup_mismatch")["rank_groups"]
    assert [(g["ranks"], g["state"]) for g in groups] == [
        ([0, 3], "in all_reduce [16x8 Float] seq 13 (pending) on group 0"),
        ([1, 2], "in all_reduce [1 Float] seq 2 (pending) on group 1"),
    ]
    assert "rank 3 never enqueued it" in groups[0]["detail"]


def test_hang_report_from_flight_recorder_shows_ranks_by_state() -> None:
    folder = FIXTURES / "rank_not_in_collective"
    result = CliRunner().invoke(
        app, ["hang", "--flight-recorder", str(folder)], env={"COLUMNS": "200"}
    )
    assert "Ranks by state" in result.output, result.output
    assert "in no collective; last all_reduce [1 Float] seq 12" in result.output
    assert "Capture Flight Recorder dumps" not in result.output  # they were read


def test_flight_recorder_groups_name_ranks_without_a_dump_and_p2p_waits(tmp_path: Path) -> None:
    from triage.grouping import group_ranks
    from triage.registry import EvidenceSet

    exited = generated(tmp_path, "rank_exited")
    run = run_tool(pickle_files=[str(p) for p in dump_files(exited)])
    groups = {g.state: g.ranks for g in group_ranks(EvidenceSet(run.evidence))}
    assert groups["no Flight Recorder dump"] == [3]
    assert sorted(r for ranks in groups.values() for r in ranks) == list(range(8))

    deadlock = generated(tmp_path, "p2p_deadlock")
    run = run_tool(pickle_files=[str(p) for p in dump_files(deadlock)])
    [group] = group_ranks(EvidenceSet(run.evidence))
    assert group.ranks == [3, 4] and group.state.startswith("in send")
    assert "cycle" in group.detail


def test_gloo_group_config_is_not_taken_for_membership() -> None:
    """gloo writes pg_config as one unnamed item with the last created group's *local*
    ranks ([0, 1, 2] here): membership must come from the entries."""
    data = load_untrusted(FIXTURES / "subgroup_mismatch" / "node07_rank3.pickle")
    assert list(data["pg_config"]) == [""]
    dumps = [fr.read_dump(p) for p in dump_files(FIXTURES / "subgroup_mismatch")]
    analysis = fr.analyze_dumps(dumps)
    members = {g.name: (g.members, g.membership) for g in analysis.groups}
    assert members == {"0": ((0, 1, 2, 3), "world"), "1": ((1, 2, 3), "observed")}
    subgroup, default = analysis.stuck
    assert subgroup.group.name == "1" and subgroup.root
    assert default.group.name == "0" and not default.root  # ranks 1-2 are stuck in group 1
    assert default.waits_on == [f"1:{subgroup.seq}"]


def test_fast_and_general_paths_agree_on_real_and_generated_dumps(tmp_path: Path) -> None:
    paths = [p for d in REAL for p in dump_files(d) if p.suffix == ".pickle"]
    for kind in ("mismatched_collective", "p2p_deadlock", "scheduled"):
        paths += dump_files(generated(tmp_path, kind, entries=300))
    for path in paths:
        fast = fr.read_dump(path)
        assert fast.fast, path
        raw = load_untrusted(path)
        whole = fr._reduce(str(path), raw, raw["entries"], len(raw["entries"]), fast=False)
        assert _summary(fast) == _summary(whole), path


def _summary(dump: fr.RankDump) -> Any:
    groups = {
        key: (
            t.last_enqueued,
            t.last_done,
            [(e.record, e.signature(), e.state, e.done) for e in t.window],
            [e.record for e in t.p2p_pending],
            t.last.record if t.last else None,
        )
        for key, t in dump.groups.items()
    }
    blocked = dump.blocked.record if dump.blocked else None
    return dump.rank, groups, blocked, dump.last.record if dump.last else None, dump.entries


# --- reading: formats, versions, names, ranks --------------------------------------------


@pytest.mark.parametrize(
    "name,rank",
    [
        ("nccl_trace_rank_12", 12),
        ("node07_rank3.pickle", 3),
        ("gpu-node-17.cluster-5", 5),
        ("fr_rank4_host9.json", 4),
        ("host12_Rank-7.pkl", 7),
        ("dump.pickle", None),
    ],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert fr.rank_from_name(f"/x/{name}") == rank


@pytest.mark.parametrize("version", ["2.4", "2.7", "2.10"])
@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_every_format_version_and_encoding_reads_alike(
    tmp_path: Path, version: str, fmt: str
) -> None:
    job, calls, planted = plant("mismatched_collective", 8, 40, 5)
    job = replace(job, version=version)
    folder = tmp_path / f"{fmt}{version}"
    write_dumps(folder, job, calls, prefix="trainer-host-04.example.com_", fmt=fmt)
    run = run_tool(**{f"{fmt}_files": [str(p) for p in dump_files(folder)]})
    best = findings(run)["hang.mismatched_collective"]
    assert best.ranks == [5]
    if fmt == "pickle":
        assert best.location is not None and best.location.line == FAULT_LINE
    overview = next(e for e in run.evidence if e.kind == "fr_overview")
    assert overview.data["versions"] == [version]


def test_old_keys_and_missing_fields_are_tolerated() -> None:
    """Dumps before pg_status and is_p2p existed: seq_id, no dtypes, states from times."""
    entries = [
        {
            "record_id": i,
            "pg_id": 0,
            "process_group": ["0", "default_pg"],
            "seq_id": i + 1,
            "profiling_name": "nccl:all_reduce",
            "input_sizes": [[4]],
            "output_sizes": [[4]],
            "time_discovered_started_ns": 1,
            "time_discovered_completed_ns": None if i == 2 else 2,
        }
        for i in range(3)
    ]
    data = pickle.dumps({"version": "2.2", "pg_config": {}, "entries": entries}, protocol=4)
    dump = fr.parse_dump("/dumps/rank_6", data)
    assert dump.rank == 6 and not dump.fast
    track = dump.groups[("0", None)]
    assert (track.last_enqueued, track.last_done) == (3, 2)
    assert track.first_pending is not None and track.first_pending.state == "started"


def test_rank_comes_from_the_dump_before_the_file_name(tmp_path: Path) -> None:
    """Tensor x data parallel: the one rank all of a dump's groups share is its rank."""
    groups = [Group("0", "default_pg", tuple(range(8)))]
    groups += [Group(str(1 + i), "tp", tuple(range(4 * i, 4 * i + 4))) for i in range(2)]
    groups += [Group(str(3 + i), "dp", (i, i + 4)) for i in range(4)]
    job = Job(8, groups=groups)
    calls = [Call("all_reduce", group="0"), Call("all_reduce", group="1", state="started")]
    raw = encode_pickle(rank_dump(job, 2, calls))
    (tmp_path / "rank_7.pickle").write_bytes(raw)  # misnamed
    (tmp_path / "labelled.pickle").write_bytes(
        pickle.dumps({**pickle.loads(raw), "rank": 5}, protocol=2)
    )
    assert fr.read_dump(tmp_path / "rank_7.pickle").rank == 2
    assert fr.read_dump(tmp_path / "rank_7.pickle").rank_from == "groups"
    assert fr.read_dump(tmp_path / "labelled.pickle").rank == 5
    run = run_tool(pickle_files=[str(tmp_path / "rank_7.pickle")])
    assert any("named rank 7" in g.reason and "rank 2" in g.reason for g in run.gaps)


def test_other_pickles_and_json_are_skipped_silently(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    shutil.copytree(FIXTURES / "rank_not_in_collective", folder)
    shutil.copy(MEMORY / "fragmented" / "snapshot.pickle", folder / "snapshot.pickle")
    shutil.copy(MEMORY / "other" / "config.json", folder / "config.json")
    run = run_tool(
        pickle_files=[str(p) for p in folder.glob("*.pickle")],
        json_files=[str(p) for p in folder.glob("*.json")],
    )
    assert not run.gaps
    assert findings(run)["hang.rank_not_in_collective"].ranks == [2]
    only_others = run_tool(pickle_files=[str(folder / "snapshot.pickle")])
    assert only_others.result.status == "no_data" and not only_others.gaps


# --- bad input: truncated, malicious, missing ------------------------------------------


class _Payload:
    """Unpickling this would create `marker`: a dump someone tampered with."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_malicious_and_truncated_dumps_are_gaps_and_the_verdict_stands(tmp_path: Path) -> None:
    folder = tmp_path / "dumps"
    shutil.copytree(FIXTURES / "mismatched_collective", folder)
    marker = tmp_path / "pwned"
    good = load_untrusted(folder / "node07_rank3.pickle")
    evil = {**good, "entries": [*good["entries"], {"frames": _Payload(marker)}]}
    (folder / "node07_rank3.pickle").write_bytes(pickle.dumps(evil, protocol=2))
    cut = (folder / "node07_rank2.pickle").read_bytes()
    (folder / "node07_rank2.pickle").write_bytes(cut[: len(cut) * 2 // 3])
    done = subprocess.run(
        triage_cli("analyze", str(folder), "--json"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert not marker.exists()
    gaps = {Path(g["source"]).name: g["reason"] for g in report["gaps"]}
    assert "refused global" in gaps["node07_rank3.pickle"]
    assert "truncated" in gaps["node07_rank2.pickle"] or "corrupt" in gaps["node07_rank2.pickle"]
    top = report["hypotheses"][0]
    assert (top["cause_id"], top["ranks"]) == ("hang.mismatched_collective", [0])
    stuck = next(e for e in report["evidence"] if e["kind"] == "fr_stuck")
    sides = {s["state"]: s["ranks"] for s in stuck["data"]["sides"]}
    # one against one: the broadcast is new to the group, the all_reduce is its loop's
    assert sides == {"waiting": [1], "other_op": [0], "unreadable": [2, 3]}


def test_a_torch_layout_dump_with_code_in_its_header_is_refused(tmp_path: Path) -> None:
    """The fast path unpickles the header itself: a global there is refused, not run."""
    folder = generated(tmp_path, "mismatched_collective", entries=100)
    path = dump_files(folder)[0]
    marker = tmp_path / "pwned"
    data = path.read_bytes()
    value = b"X\x06\x00\x00\x002.21.5"  # comm_lib_version's value
    command = f"touch {marker}".encode()
    payload = b"cposix\nsystem\n(X" + len(command).to_bytes(4, "little") + command + b"tR"
    assert data.count(value) == 1
    path.write_bytes(data.replace(value, payload))
    run = run_tool(pickle_files=[str(p) for p in dump_files(folder)])
    assert not marker.exists()
    assert [Path(g.source).name for g in run.gaps] == [path.name]
    assert "refused global posix.system" in run.gaps[0].reason
    assert findings(run)["hang.mismatched_collective"].ranks == [3]


def test_when_no_dump_can_be_read_every_file_is_a_gap(tmp_path: Path) -> None:
    good = load_untrusted(FIXTURES / "mismatched_collective" / "node07_rank0.pickle")
    marker = tmp_path / "pwned"
    evil = {**good, "pg_status": _Payload(marker)}
    (tmp_path / "rank0.pickle").write_bytes(pickle.dumps(evil, protocol=2))
    (tmp_path / "rank1.pickle").write_bytes(pickle.dumps(evil, protocol=4))
    run = run_tool(flight_recorder_dir=str(tmp_path))
    assert run.result.status == "no_data" and not run.evidence
    assert sorted(Path(g.source).name for g in run.gaps) == ["rank0.pickle", "rank1.pickle"]
    assert not marker.exists()


def test_a_missing_rank_file_is_a_gap_and_a_rank_exited_lead(tmp_path: Path) -> None:
    folder = generated(tmp_path, "rank_exited")
    run = run_tool(pickle_files=[str(p) for p in dump_files(folder)])
    assert any("no dump from rank 3 of 8" in g.reason for g in run.gaps)
    found = findings(run)["hang.rank_exited"]
    assert found.ranks == [3] and 0.4 <= found.confidence <= 0.6
    assert "exit" in found.confirm


def test_flight_recorder_dir_reads_any_names_and_reports_misnamed_files(tmp_path: Path) -> None:
    folder = generated(tmp_path, "shape_mismatch", prefix="fr-")
    (folder / "fr-8").write_text('{"not": "a dump"}')
    run = run_tool(flight_recorder_dir=str(folder))
    assert findings(run)["hang.shape_mismatch"].ranks == [3]
    assert [Path(g.source).name for g in run.gaps] == ["fr-8"]
    missing = run_tool(flight_recorder_dir=str(tmp_path / "nope"))
    assert missing.result.status == "error"


# --- NCCL-only paths (generated) ---------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["rank_not_in_collective", "mismatched_collective", "shape_mismatch", "scheduled"]
)
def test_generated_nccl_faults_name_cause_culprit_and_line(tmp_path: Path, kind: str) -> None:
    job, calls, planted = plant(kind, 16, 80, 11)
    write_dumps(tmp_path, job, calls)
    run = run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)])
    best = max(findings(run).values(), key=lambda f: f.confidence)
    assert best.cause_id == planted.cause_id
    assert best.ranks == list(planted.culprits)
    assert best.location is not None and best.location.line == planted.line


def test_send_send_deadlock_names_both_sides(tmp_path: Path) -> None:
    folder = generated(tmp_path, "p2p_deadlock")
    best = findings(run_tool(pickle_files=[str(p) for p in dump_files(folder)]))
    found = best["hang.p2p_deadlock"]
    assert found.ranks == [3, 4]
    assert "send first" in found.summary
    assert found.location is not None and found.location.line == FAULT_LINE


def test_an_unmatched_recv_points_at_the_peer_that_never_sends(tmp_path: Path) -> None:
    job = Job(4)
    done = history(10, final_state="completed")
    calls = {1: [*done, Call("recv", peer=2, state="started", line=88)]}
    write_dumps(tmp_path, job, lambda r: calls.get(r, done))
    found = findings(run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)]))
    p2p = found["hang.p2p_deadlock"]
    assert p2p.ranks == [2]
    assert "posted no matching op" in p2p.summary


def test_recv_recv_deadlock_names_both_sides(tmp_path: Path) -> None:
    job = Job(4)
    done = history(6, final_state="completed")
    calls = {
        1: [*done, Call("recv", peer=2, state="started", line=61)],
        2: [*done, Call("recv", peer=1, state="started", line=61)],
    }
    write_dumps(tmp_path, job, lambda r: calls.get(r, done))
    found = findings(run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)]))
    p2p = found["hang.p2p_deadlock"]
    assert p2p.ranks == [1, 2]
    assert "all receive first" in p2p.summary


def test_matched_sends_are_not_a_deadlock(tmp_path: Path) -> None:
    job = Job(2)
    done = history(5, final_state="completed")
    calls = {
        0: [*done, Call("send", peer=1, state="started")],
        1: [*done, Call("recv", peer=0, state="started")],
    }
    write_dumps(tmp_path, job, lambda r: calls[r])
    run = run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)])
    assert not [e for e in run.evidence if e.kind == "fr_p2p"]


def test_a_rank_behind_in_a_collective_the_others_finished(tmp_path: Path) -> None:
    job = Job(4)
    done = history(8, final_state="completed")
    ahead = [*done, Call("all_reduce", state="started", line=50)]
    stuck = [*done[:-1], replace(done[-1], state="started", line=44)]
    write_dumps(tmp_path, job, lambda r: stuck if r == 2 else ahead)
    found = findings(run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)]))
    behind = found["hang.rank_not_in_collective"]
    assert behind.ranks == [2]
    assert "not finished" in behind.summary
    assert behind.location is not None and behind.location.line == 44


def test_every_rank_in_the_same_collective_shows_no_culprit(tmp_path: Path) -> None:
    job = Job(8)
    write_dumps(tmp_path, job, lambda r: history(12))
    found = findings(run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)]))
    assert list(found) == ["hang.unknown"]
    assert found["hang.unknown"].ranks == []
    assert "no culprit" in found["hang.unknown"].summary


def test_a_member_that_never_created_the_group_is_a_subgroup_mismatch(tmp_path: Path) -> None:
    groups = [Group("0", "default_pg", (0, 1, 2, 3)), Group("1", "aux", (1, 2, 3))]
    job = Job(4, groups=groups)
    done = history(6, final_state="completed")
    stuck = [*done, Call("all_reduce", group="1", state="started", line=91)]
    lonely = Job(4, groups=groups[:1])  # rank 3 never called new_group
    for rank in range(4):
        calls = stuck if rank in (1, 2) else [*done, Call("all_reduce", state="started")]
        owner = lonely if rank == 3 else job
        (tmp_path / f"rank{rank}").write_bytes(encode_pickle(rank_dump(owner, rank, calls)))
    found = findings(run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)]))
    sub = found["hang.subgroup_mismatch"]
    assert sub.ranks == [3]
    assert "never created" in sub.summary


# --- scale: bounded evidence, linear work ------------------------------------------------


def test_evidence_stays_bounded_for_thousands_of_ranks(tmp_path: Path) -> None:
    job = Job(1024)
    normal = history(30)
    idle = normal[:-1]
    culprits = set(range(5, 1024, 64))
    write_dumps(tmp_path, job, lambda r: idle if r in culprits else normal)
    run = run_tool(pickle_files=[str(p) for p in dump_files(tmp_path)])
    assert len(run.evidence) <= 4
    found = findings(run)["hang.rank_not_in_collective"]
    assert found.ranks == sorted(culprits)
    assert len(json.dumps([e.model_dump() for e in run.evidence])) < 64_000


def test_work_per_rank_does_not_grow_with_its_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linear structure without timing: the fast path decodes a bounded number of entries
    per file whatever the buffer size, and keeps a bounded summary."""
    decoded: list[int] = []
    original = fr._Layout.decode

    def counting(self: Any, begin: int, end: int | None) -> list[Any]:
        items = original(self, begin, end)
        decoded.append(len(items))
        return items

    monkeypatch.setattr(fr._Layout, "decode", counting)
    sizes = {}
    for entries in (100, 2000):
        decoded.clear()
        folder = generated(tmp_path / str(entries), "mismatched_collective", entries=entries)
        dumps = [fr.read_dump(p) for p in dump_files(folder)]
        assert all(d.fast and d.entries == entries for d in dumps)
        sizes[entries] = (sum(decoded), max(len(list(d.all_entries())) for d in dumps))
    assert sizes[100] == sizes[2000]
    assert sizes[2000][1] <= fr.RECENT + fr.WINDOW + fr.P2P_KEEP + 2


def test_work_grows_with_ranks_not_faster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries reduced grow in proportion to ranks (no rank re-reads another's dump), and
    a group's member list is parsed once and shared by all dumps, not copied per dump."""
    calls = 0
    entry = fr._entry

    def counted(raw: Any) -> Any:
        nonlocal calls
        calls += 1
        return entry(raw)

    monkeypatch.setattr("triage.readers.flight_recorder.dump_entries._entry", counted)
    seen = {}
    for ranks in (64, 256):
        calls = 0
        fr._MEMBERS.clear()
        folder = generated(tmp_path / str(ranks), "rank_not_in_collective", ranks=ranks)
        dumps = fr.read_files([str(p) for p in dump_files(folder)]).dumps
        assert len(fr._MEMBERS) == 1  # parsed once
        assert len({id(d.configs["0"]) for d in dumps}) == 1  # one tuple for all dumps
        fr.analyze_dumps(dumps)
        seen[ranks] = calls
    assert seen[64] > 0 and seen[256] == 4 * seen[64]


def test_a_large_dump_is_read_at_its_head_and_tail_only(tmp_path: Path) -> None:
    folder = generated(tmp_path, "mismatched_collective", entries=2000)
    path = dump_files(folder)[3]
    size = path.stat().st_size
    assert size > 2 * (fr.HEAD_BYTES + fr.TAIL_BYTES)
    view = fr._Bytes(str(path), path.read_bytes()[: fr.HEAD_BYTES], size)
    fast = fr._fast_pickle(view)
    assert fast is not None and not view.complete  # the middle was never read
    assert _summary(fr.read_dump(path)) == _summary(fr.parse_dump(str(path), path.read_bytes()))


@pytest.mark.parametrize("sub", [b"}(h", b"Float", b"nccl:all_reduce", b"\x89", b"absent!"])
def test_the_lazy_view_answers_like_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sub: bytes
) -> None:
    monkeypatch.setattr("triage.readers.flight_recorder.dump_bytes.TAIL_BYTES", 4096)
    folder = generated(tmp_path, "scheduled", entries=300)
    path = dump_files(folder)[0]
    data = path.read_bytes()
    size = len(data)
    cuts = [0, 1, 5000, size // 2, size - 5000, size - 1, size]
    for start in cuts:
        for end in cuts:
            view = fr._Bytes(str(path), data[:4096], size)
            assert view.find(sub, start, end) == data.find(sub, start, end)
            view = fr._Bytes(str(path), data[:4096], size)
            assert view.rfind(sub, start, end) == data.rfind(sub, start, end)
            view = fr._Bytes(str(path), data[:4096], size)
            assert view[start:end] == data[start:end]
            if start <= end:
                assert view.count(sub, start, end) == data.count(sub, start, end)


def test_parallel_reading_matches_sequential(tmp_path: Path) -> None:
    folder = generated(tmp_path, "mismatched_collective", ranks=fr.PARALLEL_FILES + 8)
    paths = [str(p) for p in dump_files(folder)]
    (folder / "junk.pickle").write_bytes(b"\x80\x02collective_seq_id")
    paths.append(str(folder / "junk.pickle"))
    serial, parallel = fr.read_files(paths), fr.read_all(paths, workers=2)
    assert sorted(_summary(d) for d in serial.dumps) == sorted(_summary(d) for d in parallel.dumps)
    assert parallel.unreadable == serial.unreadable and len(parallel.unreadable) == 1


def test_json_dumps_of_the_generator_match_torch_json(tmp_path: Path) -> None:
    """The generator's JSON looks like torch's (keys, string pg_status, no frames)."""
    real = json.loads((FIXTURES / "mismatched_collective_json" / "node07-0.json").read_text())
    job, calls, _ = plant("mismatched_collective", 4, 5, 0)
    ours = json.loads(encode_json(rank_dump(job, 0, calls(0))))
    assert set(ours) == set(real)
    optional = {"duration_ms"}  # written by NCCL when it times its kernels
    assert set(ours["entries"][0]) - optional == set(real["entries"][0])
    assert all(isinstance(v, str) for v in ours["pg_status"]["0"].values())


def test_a_timeout_says_every_rank_is_inside_only_when_every_member_dumped(tmp_path: Path) -> None:
    """A watchdog timeout's report sends the reader below Python only when the dumps cover the
    whole group and agree; one member without a dump may be the rank that held it up."""
    from triage.registry import EvidenceSet
    from triage.rules.logs.collective_timeout import _every_member_inside

    train = tmp_path / "train.py"
    train.write_text(TRAIN)

    def said(*sides: FRSide) -> str:
        point = FRStuckGroup(
            group="0", members=4, membership="world", world=4, seq=9, root=True, sides=list(sides)
        )
        item = Evidence(
            id=point.evidence_id(), kind="fr_stuck", source="t", summary="", data=point.model_dump()
        )
        return _every_member_inside(EvidenceSet([item]))

    assert "every member of group 0 (4 ranks) dumped: ranks 0-3 wait in" in said(
        side("waiting", [0, 1, 2, 3], "all_reduce", train, 6)
    )
    assert (
        said(side("waiting", [0, 1, 2], "all_reduce", train, 6), FRSide(state="no_dump", ranks=[3]))
        == ""
    )


def test_the_last_rank_that_left_no_dump_is_still_a_member_on_gloo(tmp_path: Path) -> None:
    """gloo's pg_config names no group, but its unnamed item lists the default group's
    local ranks: a last rank that wrote no dump (it held the GIL, it was stopped) is still
    counted, and named, instead of every dumped member 'waiting with no culprit'."""
    for rank in range(3):
        shutil.copy(FIXTURES / "uneven_inputs" / f"node07_rank{rank}.pickle", tmp_path)
    top = analyze(tmp_path)["hypotheses"][0]
    assert (top["cause_id"], top["ranks"]) == ("hang.rank_exited", [3])
    assert "left no Flight Recorder dump" in top["title"]


def test_of_two_ranks_with_two_sizes_the_one_new_to_the_group_is_named() -> None:
    """One against one has no majority; the size the group never passed before is the odd
    one, named at a tie's confidence with both sides to check."""
    top = analyze(REPO / "tests" / "fixtures" / "flight_recorder_two_ranks")["hypotheses"][0]
    assert (top["cause_id"], top["ranks"], top["confidence"]) == ("hang.shape_mismatch", [0], 0.6)
    assert "[3 Float]" in top["summary"] and "check both" in top["summary"]
