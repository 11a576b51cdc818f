"""What the clouds' network stacks under NCCL say when they fail, as reports paste it
(tests/fixtures/cloud_words.json, each with its issue or source): AWS EFA's OFI plugin,
libfabric and its kernel driver, an RDMA registration over the locked-memory limit, a net
plugin built against another libfabric, GCP's TCPX/TCPXO plugins without their interfaces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_files

PASTES = json.loads((REPO / "tests" / "fixtures" / "cloud_words.json").read_text())


@pytest.mark.parametrize(
    ("name", "cause", "confidence"),
    [
        ("ofi_getinfo", "comm.infiniband", 0.5),
        ("ofi_no_provider", "comm.infiniband", 0.5),
        ("ofi_address_vector", "comm.infiniband", 0.5),
        ("efa_kernel_enomem", "comm.infiniband", 0.6),
        ("libfabric_mr_enomem", "comm.infiniband", 0.6),
        ("libfabric_internal_enomem", "comm.infiniband", 0.6),
        ("ofi_endpoint_enomem", "comm.infiniband", 0.6),
        ("rdma_core_cq_enomem", "comm.infiniband", 0.8),
        ("plugin_libfabric_version", "comm.version_mismatch", 0.6),
        ("fastrak_no_interface", "comm.wrong_interface", 0.8),
        ("tcpx_no_ctrl_interface", "comm.wrong_interface", 0.8),
    ],
)
def test_the_cloud_network_words_name_their_cause(
    tmp_path: Path, name: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"rank0.log": PASTES[name]["text"]}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


@pytest.mark.parametrize(
    "name", ["libfabric_mr_enomem", "libfabric_internal_enomem", "ofi_endpoint_enomem"]
)
def test_rdma_out_of_locked_memory_is_no_host_oom(tmp_path: Path, name: str) -> None:
    """`Cannot allocate memory` from a memory registration is the memlock limit: raising
    host RAM would not help, `ulimit -l unlimited` does."""
    report = analyze_files(tmp_path, {"rank0.log": PASTES[name]["text"]})
    assert all(h.cause_id != "oom.host" for h in report.hypotheses)
    assert "ulimit -l unlimited" in report.hypotheses[0].fix
