"""Distributed PyTorch beside Linux and NCCL, in its own words as reports paste them
(tests/fixtures/platform_words.json, each with its issue): Windows' socket codes and its
builds without NCCL or env://, gloo's devices, families, timeouts and sizes (its libuv
transport too), macOS's MPS under Lightning, a backend this build does not know."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "platform_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("nccl_bulit_in", "config.backend_device", 0.9),
        ("device_ids_on_gloo", "config.backend_device", 0.86),
        ("lightning_mps_ddp", "config.backend_device", 0.9),
        ("unknown_backend_mpi", "config.backend_device", 0.9),
        ("gloo_no_device", "comm.wrong_interface", 0.6),
        ("gloo_families", "comm.wrong_interface", 0.6),
        ("windows_port_in_use", "comm.rendezvous", 0.9),
        ("no_env_handler", "comm.rendezvous", 0.75),
        ("gloo_timeout_recv_send", "hang.collective_timeout", 0.5),
        ("ddp_device_ids_1_6", "config.device_assignment", 0.8),
        ("gloo_uv_size", "hang.shape_mismatch", 0.7),
    ],
)
def test_the_platforms_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"rank0.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


def test_gloos_loopback_warning_alone_is_no_failure(tmp_path: Path) -> None:
    """Every rank of a one-host job warns `Using the loopback address as fallback` and runs:
    over the loopback its ranks reach each other. Only a failure beside it makes it the cause."""
    report = analyze_files(tmp_path, {"rank0.log": PASTES["gloo_loopback_warning"]["text"]})
    assert all(h.cause_id != "comm.wrong_interface" for h in report.hypotheses)
