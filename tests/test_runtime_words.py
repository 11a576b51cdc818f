"""The words of the runtimes around the collectives (DeepEP's expert-parallel kernels,
TransformerEngine's userbuffers, SGLang's launcher, vLLM's executor, torchtitan's resume), as
their sources print them or users pasted them: each reads as the family it belongs to, not as
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "DeepEP timeout for dispatch receivers, rank 3, responsible_channel = 5, tokens"
            " remained: 17",
            "hang.unknown",
        ),
        ("RuntimeError: DeepEP error: timeout (dispatch CPU)", "hang.unknown"),
        (
            "[userbuffers.cu:userbuffers_fp16_sum_inplace_gpu_rw:93] [3] Allreduce"
            " reduce-scatter: SM 2 [5]: expecting 1287 got 1286",
            "hang.unknown",
        ),
        (
            "[userbuffers.cu:kuserbuffers_pushrecv:2073] pushrecv [grank dst:3 global src:2]"
            "[nvrank(GPU) dst: 3 src: 2]: expecting 58, observed 57",
            "hang.unknown",
        ),
        (
            "[2025-03-01 10:00:00] Scheduler or DataParallelController 48213 terminated with -9",
            "oom.host",
        ),
        (
            "[2025-03-01 10:00:00] Subprocess process_0 (pid=48213) crashed with exit code -6."
            " Triggering SIGQUIT for cleanup...",
            "hang.rank_exited",
        ),
        # OpenPipe/ART#201: vLLM's executor losing a worker
        (
            "ERROR 07-04 17:35:16 [multiproc_executor.py:140] Worker proc VllmWorker-1 died"
            " unexpectedly, shutting down executor.",
            "hang.rank_exited",
        ),
        # vllm-project/vllm#14452 (vLLM's own spelling)
        (
            "CRITICAL 03-15 17:24:18 [multiproc_executor.py:48] MulitprocExecutor got fatal signal"
            " from worker processes, shutting down. See stack trace above for root cause issue.",
            "hang.rank_exited",
        ),
        # torchtitan resuming its data loader at another data-parallel degree
        (
            "[rank0]: AssertionError: dp_degree is inconsistent before and after checkpoint,"
            " dataloader resharding is not supported yet.",
            "config.world_size_mismatch",
        ),
    ],
    ids=[
        "deepep-kernel",
        "deepep-cpu",
        "userbuffers-rs",
        "userbuffers-recv",
        "sglang-9",
        "sglang-6",
        "vllm-worker-died",
        "vllm-fatal-signal",
        "torchtitan-dp-degree",
    ],
)
def test_a_runtimes_own_failure_reads_as_its_family(tmp_path: Path, line: str, cause: str) -> None:
    top = analyze_files(tmp_path, {"server.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause, (top.cause_id, top.title)
