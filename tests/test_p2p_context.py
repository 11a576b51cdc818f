"""What a report says of the host (GPUs linked only over PCIe, consumer cards) as a weak
peer-to-peer reading when the text shows no failure; a failure, or NVLink, silences it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files

TOPO_PCIE = (
    "        GPU0    GPU1    GPU2    CPU Affinity    NUMA Affinity\n"
    "GPU0     X      PHB     SYS     0-31            0\n"
    "GPU1    PHB      X      SYS     0-31            0\n"
    "GPU2    SYS     SYS      X      32-63           1\n"
)
TOPO_NVLINK = (
    "        GPU0    GPU1    CPU Affinity\n"
    "GPU0     X      NV12    0-31\n"
    "GPU1    NV12     X      0-31\n"
)
CARDS = "GPU 0: NVIDIA GeForce RTX 4090\nGPU 1: NVIDIA GeForce RTX 4090\n"


def hypotheses(tmp_path: Path, text: str, symptom: str | None = None) -> list[tuple[str, str]]:
    report = analyze_files(tmp_path, {"env.txt": text}, symptom=symptom)
    return [(h.cause_id, h.rule_id) for h in report.hypotheses]


@pytest.mark.parametrize(("text", "confidence"), [(TOPO_PCIE, 0.25), (CARDS, 0.2)])
def test_gpus_without_nvlink_are_a_weak_p2p_reading(
    tmp_path: Path, text: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"env.txt": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("comm.p2p_unsupported", confidence)
    assert "NCCL_P2P_DISABLE=1" in top.fix


@pytest.mark.parametrize(
    "text",
    [
        TOPO_NVLINK,
        "GPU 0: NVIDIA GeForce RTX 4090\n",  # one card
        CARDS + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    ],
    ids=["nvlink", "one-card", "a-failure"],
)
def test_nvlink_one_card_or_a_failure_is_no_p2p_reading(tmp_path: Path, text: str) -> None:
    assert ("comm.p2p_unsupported", "logs.p2p_context") not in hypotheses(tmp_path, text)


@pytest.mark.parametrize("symptom", ["hang", "oom"])
def test_a_named_symptom_keeps_the_context_beside_its_own_unknown(
    tmp_path: Path, symptom: str
) -> None:
    found = hypotheses(tmp_path, TOPO_PCIE, symptom=symptom)
    assert found == [
        ("comm.p2p_unsupported", "logs.p2p_context"),
        (f"{symptom}.unknown", "engine.fallback"),
    ]
