"""What logs.ddp_reducer and logs.fabric must leave alone: the neighbouring causes' real logs.

Each text is verbatim from the public report named beside it (or a recorded fixture); the
rule must not fire on it, so the neighbouring rule keeps its case.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO
from triage.engine import gather
from triage.playbooks import get_playbook
from triage.registry import EvidenceSet, run_rules, select


def fired(paths: list[Path]) -> set[str]:
    """The IDs of the rules that fire on these files, gathered as `triage analyze` does."""
    evidence = gather(get_playbook("analyze"), {"paths": [str(p) for p in paths]}).evidence
    return {r.id for r, _ in run_rules(select(["*"]), EvidenceSet(evidence))}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "console.log"
    path.write_text(text)
    return path


# pytorch/pytorch#97030: static_graph=True with an output left out of the loss. DDP reports
# a parameter without a gradient, logs.unused_parameters' case.
UNFINISHED_STATIC = (
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting "
    "a new one. This error indicates that your training graph has changed in this iteration, "
    "e.g., one parameter is used in first iteration, but then got unused in the second "
    "iteration. this is not compatible with static_graph set to True.\n"
)

# NVIDIA/nccl#1029: CUDA fails to initialise in a container on A100s; not error 802, not
# the fabric manager.
CUDA_INIT_ERROR = """\
rdma-test-gpu-worker-1: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1197, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.3
rdma-test-gpu-worker-1: ncclUnhandledCudaError: Call to CUDA function failed.
rdma-test-gpu-worker-1: Last error:
rdma-test-gpu-worker-1: Cuda failure 'initialization error'
"""


def test_unused_parameters_run_is_not_a_reducer_error() -> None:
    run = REPO / "tests/fixtures/logs/ddp_unused_parameters"
    rules = fired([run])
    assert "logs.unused_parameters" in rules
    assert "logs.ddp_reducer" not in rules


def test_unfinished_reduction_under_static_graph_stays_unused_parameters(tmp_path: Path) -> None:
    rules = fired([write(tmp_path, UNFINISHED_STATIC)])
    assert "logs.unused_parameters" in rules
    assert "logs.ddp_reducer" not in rules


def test_cuda_initialization_error_is_not_the_fabric(tmp_path: Path) -> None:
    assert "logs.fabric" not in fired([write(tmp_path, CUDA_INIT_ERROR)])


def test_reducer_and_fabric_fixtures_fire_nothing_of_each_other() -> None:
    here = Path(__file__).resolve().parent
    assert "logs.fabric" not in fired(sorted((here / "logs.ddp_reducer").rglob("*.log")))
    assert "logs.ddp_reducer" not in fired(sorted((here / "logs.fabric").rglob("*.log")))
