"""torch's own words for a setup the job's code and its machines disagree on name the cause.

Each line is the message torch raises (checked against torch's sources: cuda/__init__.py,
nn/parallel/data_parallel.py, and the reducer's parameter check in libtorch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause", "rule"),
    [
        (
            "AssertionError: Torch not compiled with CUDA enabled",
            "config.backend_device",
            "logs.backend_device",
        ),
        (
            "RuntimeError: module must have its parameters and buffers on device cuda:0"
            " (device_ids[0]) but found one of them on device: cpu",
            "config.device_assignment",
            "logs.device_assignment",
        ),
        (
            "RuntimeError: DDP expects same model across all ranks, but Rank 0 has 212 params,"
            " while rank 1 has inconsistent 211 params.",
            "hang.shape_mismatch",
            "logs.shape_mismatch",
        ),
        (
            "RuntimeError: [1]: params[0] in this process with sizes [512, 256] appears not to"
            " match sizes of the same param in process 0.",
            "hang.shape_mismatch",
            "logs.shape_mismatch",
        ),
    ],
    ids=["cpu-only-build", "dataparallel-module-on-cpu", "ddp-param-count", "ddp-param-size"],
)
def test_the_message_names_its_cause(tmp_path: Path, line: str, cause: str, rule: str) -> None:
    top = analyze_files(tmp_path, {"rank1.log": f"[rank1]:{line}\n"}).hypotheses[0]
    assert (top.cause_id, top.rule_id) == (cause, rule)
    assert 0.5 <= top.confidence < 0.8


def test_the_launchs_advice_to_read_local_rank_is_not_a_missing_variable(tmp_path: Path) -> None:
    """torch.distributed.launch's deprecation warning quotes `os.environ['LOCAL_RANK']`; with
    an unrelated traceback below it, the quote is no variable read by the failing code."""
    log = (
        "If your script expects `--local_rank` argument to be set, please\n"
        "change it to read from `os.environ['LOCAL_RANK']` instead. See \n"
        "Traceback (most recent call last):\n"
        '  File "/opt/train.py", line 12, in <module>\n'
        "    x = load()\n"
        "ValueError: bad shard count\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": log})
    assert all(h.cause_id != "config.env_missing" for h in report.hypotheses)
