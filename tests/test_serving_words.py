"""What multi-GPU inference servers and RL trainers say when a job fails, as reports paste it
(tests/fixtures/serving_words.json, each with its issue or source): text-generation-inference's
launcher, SGLang's scheduler watchdog and memory check, TensorRT-LLM's and vLLM's world checks,
vLLM's Ray nodes, the RL trainers' counts of the cluster's GPUs, UCX's locked memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "serving_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("tgi_sigbus", "comm.shm_exhausted", 0.5),
        ("tgi_sigkill", "oom.host", 0.6),
        ("sglang_watchdog", "hang.unknown", 0.2),
        ("sglang_watchdog_killed", "hang.unknown", 0.2),
        ("sglang_unbalanced", "oom.other_process", 0.6),
        ("tgi_prefill", "oom.capacity", 0.6),
        ("trtllm_world", "config.world_size_mismatch", 0.88),
        ("trtllm_mpisize", "config.world_size_mismatch", 0.88),
        ("vllm_gpus_per_node", "config.world_size_mismatch", 0.88),
        ("vllm_unique_ip", "comm.wrong_interface", 0.55),
        ("verl_gpus", "config.world_size_mismatch", 0.8),
        ("nemo_rl_gpus", "config.world_size_mismatch", 0.8),
        ("vllm_tp_gpus", "config.world_size_mismatch", 0.8),
    ],
)
def test_the_serving_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"server.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


def test_a_killed_after_the_launcher_kills_its_own_tree_is_no_host_oom(tmp_path: Path) -> None:
    """SGLang answers a failed child with SIGKILL to every process: the shell's `Killed` after
    `Received sigquit from a child proces` is that teardown."""
    report = analyze_files(tmp_path, {"server.log": PASTES["sglang_watchdog_killed"]["text"]})
    assert all(h.cause_id != "oom.host" for h in report.hypotheses)


def test_rdma_out_of_locked_memory_in_ucxs_words_is_no_host_oom(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"server.log": PASTES["ucx_memlock"]["text"]})
    assert all(h.cause_id != "oom.host" for h in report.hypotheses)
