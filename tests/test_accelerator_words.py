"""What the other accelerators' stacks say when a distributed job fails, as reports paste it
(tests/fixtures/accelerator_words.json, each with its issue or source): ROCm's RCCL and HIP,
Ascend's HCCL, Intel's XCCL and Level Zero, Habana's Gaudi, Google's TPU and torch_xla. Each
reads as the NVIDIA wording of the same fault does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "accelerator_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("rccl_ipc", "comm.p2p_unsupported", 0.85),
        ("rocm_no_binary", "comm.version_mismatch", 0.75),
        ("hip_invalid_device_function", "comm.version_mismatch", 0.75),
        ("hccl_teardown", "hang.collective_timeout", 0.35),
        ("hccl_socket_timeout", "hang.unknown", 0.2),
        ("hccl_op_unsupported", "config.backend_device", 0.86),
        ("xccl_op_unimplemented", "config.backend_device", 0.86),
        ("xpu_dense", "config.backend_device", 0.88),
        ("gaudi_acquired", "config.device_assignment", 0.6),
        ("tpu_in_use", "config.device_assignment", 0.6),
        ("tpu_vfio_busy", "config.device_assignment", 0.6),
        ("gaudi_devmem", "oom.capacity", 0.35),
        ("level_zero_oom", "oom.capacity", 0.35),
        ("xla_mesh_failed", "comm.rendezvous", 0.8),
        ("xla_mesh_waiting", "comm.rendezvous", 0.2),
    ],
)
def test_the_accelerators_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"rank0.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title
