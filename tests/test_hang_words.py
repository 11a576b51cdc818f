"""What a hang's logs say in words the rules read as its cause, as reports and torch's
sources word them (tests/fixtures/hang_words.json, each with its issue or source): a later
group's store barrier short of the world, NCCL's kernels finding a mismatch, DDP's Join, the
process group guessing a rank's GPU, torchelastic's agent still joining its rendezvous, vLLM's
workers no longer reading its broadcast queue; and one line of NCCL set-up quoted alone,
which is not a stall."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "hang_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("store_barrier_group", "hang.subgroup_mismatch", 0.45),
        ("store_barrier_group_2x", "hang.subgroup_mismatch", 0.45),
        ("nccl_mismatch_asserted", "hang.mismatched_collective", 0.65),
        ("join_exhausted", "hang.uneven_inputs", 0.8),
        ("best_guess_gpu", "config.device_assignment", 0.3),
        ("elastic_join", "comm.rendezvous", 0.2),
        ("vllm_broadcast_wait", "hang.unknown", 0.2),
    ],
)
def test_the_hang_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"rank0.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


def test_the_worlds_own_store_barrier_short_of_ranks_stays_a_world_size_question(
    tmp_path: Path,
) -> None:
    """Key 1 is init_process_group's barrier: fewer workers than WORLD_SIZE is a launch that
    started fewer processes (or a rank that never got there), not a subgroup."""
    text = PASTES["store_barrier_group_2x"]["text"].replace("barrier_key:2", "barrier_key:1")
    top = analyze_files(tmp_path, {"rank0.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("config.world_size_mismatch", 0.35)


def test_one_line_of_nccl_set_up_is_a_quote_not_a_stall(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"rank0.log": PASTES["nccl_setup_line"]["text"]})
    p2p = [h for h in report.hypotheses if h.cause_id == "comm.p2p_unsupported"]
    assert p2p and p2p[0].confidence <= 0.3
