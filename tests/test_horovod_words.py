"""Horovod's own words. Its coordinator refuses a collective whose ranks submitted different
things under one tensor name (horovod/common/controller.cc's messages, and the older MPI-era
wording): a size or dtype is a shape mismatch, an op, root, scale factor or device is the ranks
calling different collectives, and neither names the odd rank. Its launcher's network
discovery, its gloo rendezvous, a build without what the job uses and a worker that exited
read as their causes (real pastes where the issue thread holds one, else the source's text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "horovod.common.exceptions.HorovodInternalError: Mismatched ALLREDUCE tensor shapes:"
            " One rank sent a tensor of shape [10], but another rank sent a tensor of shape [11].",
            "hang.shape_mismatch",
        ),
        (
            "Mismatched ALLGATHER tensor shapes: One rank sent a tensor with dimension 1 equal to"
            " 128, but another rank sent a tensor with dimension 1 equal to 64.",
            "hang.shape_mismatch",
        ),
        (
            "tensorflow.python.framework.errors_impl.FailedPreconditionError: Mismatched data"
            " types: One rank had type float32, but another rank had type float64.",
            "hang.shape_mismatch",
        ),
        (
            "RuntimeError: Mismatched allreduce tensor shapes: One rank reduced a tensor of shape"
            " [10], but another rank sent a tensor of shape [11].",
            "hang.shape_mismatch",
        ),
        (
            "horovod.common.exceptions.HorovodInternalError: Mismatched operations: One rank did"
            " an ALLREDUCE, but another rank did an BROADCAST.",
            "hang.mismatched_collective",
        ),
        (
            "Mismatched MPI operations: One rank did an allreduce, but another rank did an"
            " allgather.",
            "hang.mismatched_collective",
        ),
        (
            "horovod.common.exceptions.HorovodInternalError: Mismatched reduction operation: One"
            " rank sent reduction op 0, but another rank sent reduction op 1.",
            "hang.mismatched_collective",
        ),
        (
            "Mismatched BROADCAST root ranks: One rank specified root rank 0, but another rank"
            " specified root rank 1.",
            "hang.mismatched_collective",
        ),
        (
            "Mismatched ALLREDUCE CPU/GPU device selection: One rank specified device GPU, but"
            " another rank specified device CPU.",
            "hang.mismatched_collective",
        ),
    ],
    ids=[
        "shapes",
        "gather-dims",
        "dtypes",
        "mpi-era-shapes",
        "ops",
        "mpi-era-ops",
        "reduce-op",
        "root",
        "device",
    ],
)
def test_the_coordinators_refusal_names_what_differs(tmp_path: Path, line: str, cause: str) -> None:
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence, top.ranks) == (cause, 0.7, [])
    assert "One " in top.summary and "does not say which rank" in top.summary


def test_a_mismatch_word_elsewhere_is_not_horovods(tmp_path: Path) -> None:
    text = "ValueError: Mismatched tensor shapes in the config: see docs\n"
    causes = [h.cause_id for h in analyze_files(tmp_path, {"rank0.log": text}).hypotheses]
    assert "hang.shape_mismatch" not in causes


@pytest.mark.parametrize(
    ("text", "cause", "confidence"),
    [
        # ray-project/ray#15300
        (
            "horovod.runner.common.util.timeout.TimeoutException: Timed out waiting for tasks to"
            " start. Please check connectivity between servers. You may need to increase the"
            " --start-timeout parameter if you have too many servers. Timeout after 30 seconds.",
            "comm.rendezvous",
            0.55,
        ),
        # ray-project/ray#25866
        (
            "terminate called after throwing an instance of 'gloo::IoException'\n  what():  [/tmp"
            "/pip-install-43a3uo3a/horovod_33a452dfb1f34b4e998a6265ba22cf83/horovod/common/gloo/"
            "http_store.cc:57] [/tmp/pip-install-43a3uo3a/horovod_33a452dfb1f34b4e998a6265ba22cf83"
            "/horovod/common/gloo/http_store.cc:57] Wait timeout after 30 seconds for key(s): 0."
            " You may want to increase the timeout via HOROVOD_GLOO_TIMEOUT",
            "comm.rendezvous",
            0.55,
        ),
        # horovod/horovod#2432
        (
            "horovod.runner.common.util.network.NoValidAddressesFound: Horovod was unable to"
            " connect to task service #1 on any of the following addresses: {'ens192':"
            " [('192.168.21.50', 8394)]}.",
            "comm.wrong_interface",
            0.6,
        ),
        # volcano-sh/volcano#859
        (
            "ERROR: Task 1 declared addresses {'lo': [('127.0.0.1', 55651)], 'eth0':"
            " [('192.168.101.5', 55651)]}, but has connected from a different address"
            " 192.168.101.0. This is not supported. Is the server behind NAT?",
            "comm.wrong_interface",
            0.6,
        ),
        # horovod/horovod#1668
        (
            "ImportError: Extension horovod.torch has not been built.  If this is not expected,"
            " reinstall Horovod with HOROVOD_WITH_PYTORCH=1 to debug the build error.",
            "config.backend_device",
            0.85,
        ),
        (
            "ValueError: Gloo support is required to use elastic training, but has not been"
            " built.  Ensure CMake is installed and reinstall Horovod with HOROVOD_WITH_GLOO=1 to"
            " debug the build error.",
            "config.backend_device",
            0.85,
        ),
        (
            "horovod.common.exceptions.HorovodInternalError: Type float16 is not supported in"
            " Gloo mode.",
            "config.backend_device",
            0.8,
        ),
        (
            "horovod.common.exceptions.HorovodVersionMismatchError: Framework pytorch installed"
            " with version 1.10.0+cu113 but found version 1.12.1+cu113.\n             This can"
            " result in unexpected behavior including runtime errors.",
            "comm.version_mismatch",
            0.85,
        ),
        # horovod/horovod#2484: the first worker to exit was killed (137)
        (
            "RuntimeError: Horovod detected that one or more processes exited with non-zero"
            " status, thus causing the job to be terminated. The first process to do so was:\n"
            "Process name: elastic-test-worker-1[0]\nExit code: 137\n",
            "oom.host",
            0.6,
        ),
    ],
    ids=[
        "tasks-not-started",
        "gloo-store-wait",
        "no-valid-address",
        "nat",
        "torch-not-built",
        "gloo-not-built",
        "gloo-dtype",
        "framework-version",
        "first-exit-137",
    ],
)
def test_the_launchers_and_builds_words_name_their_cause(
    tmp_path: Path, text: str, cause: str, confidence: float
) -> None:
    top = analyze_files(tmp_path, {"horovodrun.log": text + "\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence) == (cause, confidence), top.title


def test_the_first_worker_horovod_saw_exit_is_named(tmp_path: Path) -> None:
    """determined-ai/determined#3275: the launcher's report is a stop, the rank its subject."""
    text = (
        "RuntimeError: Horovod detected that one or more processes exited with non-zero status,"
        " thus causing the job to be terminated. The first process to do so was:\nProcess name:"
        " 1\nExit code: 1\n"
    )
    top = analyze_files(tmp_path, {"horovodrun.log": text}).hypotheses[0]
    assert (top.cause_id, top.ranks, top.confidence) == ("hang.rank_exited", [1], 0.2)
