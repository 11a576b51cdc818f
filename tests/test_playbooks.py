"""Playbooks parse, and the engine runs them end to end on tools and rules."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files
from triage.engine import follow, gather
from triage.models import Evidence
from triage.observations import LogSignal
from triage.playbooks import (
    Playbook,
    PlaybookError,
    PlaybookStep,
    get_playbook,
    load_playbooks,
    parse_playbook,
)
from triage.registry import DOC_SECTIONS, REGISTRY, RULES, Registry, ToolOutput
from triage.taxonomy import CAUSES


def test_bundled_hang_playbook_names_registered_tools() -> None:
    playbook = get_playbook("hang")
    assert playbook.symptom == "hang"
    assert [s.tool for s in playbook.steps][:4] == [
        "discover_ranks",
        "signal_probes",
        "check_environment",
        "dump_stacks",
    ]
    signalling = playbook.steps[1]  # acts on the job: only when the user asked
    assert (
        signalling.needs == ["signal_probe", "pids"] and not REGISTRY.get("signal_probes").read_only
    )
    assert [s.tool for s in playbook.steps if s.background] == ["check_environment"]
    assert "## 1." in playbook.body


def test_every_bundled_playbook_runs_registered_tools_only() -> None:
    for playbook in load_playbooks().values():
        assert all(step.tool in REGISTRY for step in playbook.steps), playbook.name


def test_every_rule_has_a_known_cause_and_full_doc() -> None:
    assert RULES
    for rule in RULES.values():
        assert rule.cause_id in CAUSES
        assert all(rule.doc.get(section) for section in DOC_SECTIONS), rule.id


def test_every_hang_cause_has_a_rule() -> None:
    covered = {r.cause_id for r in RULES.values()}
    wanted = {
        "hang.mismatched_collective", "hang.rank_not_in_collective", "hang.rank_exited",
        "hang.uneven_inputs", "hang.p2p_deadlock", "hang.subgroup_mismatch", "hang.unknown",
    }  # fmt: skip
    assert wanted <= covered


def test_bad_front_matter_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.md"
    path.write_text("+++\nname = 'x'\n+++\nbody")
    with pytest.raises(PlaybookError, match="bad.md"):
        parse_playbook(path)


def test_user_playbook_overrides_and_readmes_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# not a playbook")
    source = get_playbook("hang").path
    text = Path(source).read_text().replace('title = "Hang', 'title = "Site hang')
    (tmp_path / "hang.md").write_text(text)
    assert load_playbooks([tmp_path])["hang"].title.startswith("Site hang")


def test_dead_pid_yields_a_gap_and_the_fallback_not_a_crash() -> None:
    report = follow(get_playbook("hang"), {"pids": [2**22 + 12345]})
    assert report.hypotheses[0].cause_id == "hang.unknown"
    assert any("does not exist" in gap.reason for gap in report.gaps)
    assert report.tool_runs[0].tool == "discover_ranks"


def test_background_step_overlaps_the_next_and_lands_in_playbook_order() -> None:
    """A background step runs while the next one does; the report keeps playbook order."""
    registry = Registry()
    started = threading.Event()

    def slow() -> ToolOutput:
        assert started.wait(10), "the step after a background step did not start meanwhile"
        return ToolOutput(evidence=[Evidence(id="slow", kind="k", source="s", summary="slow")])

    def quick() -> ToolOutput:
        started.set()
        return ToolOutput(evidence=[Evidence(id="quick", kind="k", source="s", summary="q")])

    registry.register(slow, "slow", "Slow.")
    registry.register(quick, "quick", "Quick.")
    playbook = Playbook(
        name="p",
        symptom="hang",
        title="t",
        summary="s",
        causes=[],
        steps=[PlaybookStep(tool="slow", background=True), PlaybookStep(tool="quick")],
    )
    report = gather(playbook, {}, registry)
    assert [r.tool for r in report.tool_runs] == ["slow", "quick"]
    assert [e.id for e in report.evidence] == ["slow", "quick"]


def _log_signal(name: str, text: str) -> Evidence:
    signal = LogSignal(signature=name, text=text, path="rank0.log", line=1, rank=0)
    return Evidence(
        id=f"log:{name}",
        kind="log_signal",
        source="rank0.log:1",
        summary="",
        data=signal.model_dump(),
    )


def test_next_steps_are_plain_strings_or_tables_with_conditions(tmp_path: Path) -> None:
    path = tmp_path / "site.md"
    path.write_text(
        '+++\nname = "site"\nsymptom = "hang"\ntitle = "t"\nsummary = "s"\nsteps = []\n'
        'causes = ["hang.*"]\nnext_steps = [\n    "Always.",\n'
        '    { text = "Unless FR.", unless_evidence = ["fr_overview"] },\n'
        '    { text = "Unless DETAIL.", unless_signals = ["hang.fingerprint*"] },\n]\n+++\nbody'
    )
    playbook = parse_playbook(path)
    assert [s.text for s in playbook.next_steps] == ["Always.", "Unless FR.", "Unless DETAIL."]

    overview = Evidence(id="fr:overview", kind="fr_overview", source="d", summary="")
    # A real TORCH_DISTRIBUTED_DEBUG=DETAIL line (gloo, torch 2.15), prefixes stripped.
    detail = _log_signal(
        "hang.fingerprint",
        "[Rank 0] Running collective: CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, "
        "TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float "
        "(default), device=cpu, layout=Strided (default), requires_grad=false (default), "
        "pinned_memory=false (default), memory_format=(nullopt)))",
    )
    always, unless_fr, unless_detail = playbook.next_steps
    assert always.applies([overview, detail])
    assert unless_fr.applies([detail]) and not unless_fr.applies([overview])
    assert unless_detail.applies([overview]) and not unless_detail.applies([detail])


def test_a_malformed_next_step_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.md"
    path.write_text(
        '+++\nname = "x"\nsymptom = "hang"\ntitle = "t"\nsummary = "s"\nsteps = []\n'
        'causes = []\nnext_steps = [{ txt = "typo" }]\n+++\nbody'
    )
    with pytest.raises(PlaybookError, match="bad.md"):
        parse_playbook(path)


def test_the_hang_playbook_leaves_out_what_the_evidence_shows_done(tmp_path: Path) -> None:
    """Flight Recorder dumps were read and the logs hold DETAIL output: suggesting either
    again is noise; NCCL_DEBUG=INFO is still worth suggesting, until the dumps show a gloo
    job."""
    lines = [
        f"[rank{r}]:[I1122 00:21:39.85861050{r} ProcessGroupWrapper.cpp:724] [Rank {r}] Running "
        "collective: CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[4], "
        "TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, "
        "layout=Strided (default), requires_grad=false (default), pinned_memory=false "
        "(default), memory_format=(nullopt)))"
        for r in (0, 1)
    ]
    (tmp_path / "rank0.log").write_text("\n".join(lines) + "\n")
    fr = Path(__file__).parent / "fixtures" / "flight_recorder" / "mismatched_collective"
    plain = follow(get_playbook("hang"), {"paths": [str(tmp_path)]})
    both = follow(get_playbook("hang"), {"paths": [str(tmp_path)], "flight_recorder_dir": str(fr)})
    assert any("Capture Flight Recorder" in s for s in plain.next_steps)
    assert not any("TORCH_DISTRIBUTED_DEBUG=DETAIL" in s for s in plain.next_steps)
    assert not any("Capture Flight Recorder" in s for s in both.next_steps)
    assert any(s.startswith("Set NCCL_DEBUG=INFO") for s in plain.next_steps)
    assert not any("NCCL_DEBUG" in s for s in both.next_steps)  # the dumps are gloo's


def test_a_symptom_weighs_every_cause_and_falls_back_to_its_own_family(tmp_path: Path) -> None:
    """`triage hang` on a job that hung because two ranks share a GPU names the shared GPU (a
    config cause), not a hang cause it cannot support; with nothing read, it is hang.unknown."""
    dup = (REPO / "tests" / "fixtures" / "gpu" / "dup_gpu.log").read_text()
    (tmp_path / "dup").mkdir()
    (tmp_path / "quiet").mkdir()
    hang = analyze_files(tmp_path / "dup", {"rank0.log": dup}, symptom="hang")
    assert hang.symptom == "hang"
    assert hang.hypotheses[0].cause_id == "config.device_assignment"
    quiet = analyze_files(tmp_path / "quiet", {"rank0.log": "step 10 loss 2.31"}, symptom="hang")
    assert [h.cause_id for h in quiet.hypotheses] == ["hang.unknown"]


def test_a_guess_below_the_hand_over_line_does_not_hide_the_named_symptom(tmp_path: Path) -> None:
    """A traceback cut before its exception (HRNet/HRFormer#1, a dev case: the OOM line was
    not pasted) is only a guess at its family (config.unknown, 0.08): the user who says `triage
    oom` still gets oom.unknown and its next steps, ranked beside it."""
    cut = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/HRFormer/seg/main.py", line 541, in <module>\n'
        "    model.train()\n"
        '  File "/home/u/HRFormer/seg/segmentor/trainer.py", line 187, in __train\n'
        "    outputs = self.seg_net(*inputs)\n"
    )
    (tmp_path / "alone").mkdir()
    (tmp_path / "oom").mkdir()
    alone = analyze_files(tmp_path / "alone", {"rank0.log": cut})
    assert [(h.cause_id, h.confidence) for h in alone.hypotheses] == [("config.unknown", 0.08)]
    oom = analyze_files(tmp_path / "oom", {"rank0.log": cut}, symptom="oom")
    assert [h.cause_id for h in oom.hypotheses] == ["oom.unknown", "config.unknown"]
