"""OOM evidence in log text: memory_summary() tables and the memory training loops print.

The tables are torch's own output: torch.cuda.memory_summary() of torch 2.15, run on a
memory_stats() dict (the function formats whatever memory_stats returns, so it runs without
a GPU), and torch 1.x's layout (sizes in "MB") from that version's format strings. Step
lines follow the format strings of the code that prints them: DeepSpeed's see_memory_usage,
torchtitan's metrics line, torchtune's DiskLogger, mmengine's LogProcessor, mmcv's
TextLoggerHook, detectron2's CommonMetricPrinter, and home-grown loops'
`step N ... memory_allocated: X GB`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import analyze_files, hypothesis
from triage.models import Report
from triage.readers import signatures
from triage.readers.logscan import scan_file
from triage.readers.signatures.memory import SummaryTable

MiB, GiB = 2**20, 2**30

# torch 2.15: memory_summary(device=0) after an OOM, half the reserved memory stuck in split
# segments (4 cudaMalloc retries).
FRAGMENTED = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 4         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  18032 MiB |  38297 MiB |  15848 GiB |  15831 GiB |
|       from large pool |  17491 MiB |  37148 MiB |  15373 GiB |  15356 GiB |
|       from small pool |    540 MiB |   1148 MiB |    475 GiB |    474 GiB |
|---------------------------------------------------------------------------|
| Active memory         |  18032 MiB |  38297 MiB |  15848 GiB |  15831 GiB |
|       from large pool |  17491 MiB |  37148 MiB |  15373 GiB |  15356 GiB |
|       from small pool |    540 MiB |   1148 MiB |    475 GiB |    474 GiB |
|---------------------------------------------------------------------------|
| Requested memory      |  18002 MiB |  38267 MiB |  15831 GiB |  15813 GiB |
|       from large pool |  17462 MiB |  37119 MiB |  15356 GiB |  15339 GiB |
|       from small pool |    540 MiB |   1148 MiB |    474 GiB |    474 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  38840 MiB |  38912 MiB |  43008 MiB |   4167 MiB |
|       from large pool |  37675 MiB |  37744 MiB |  41717 MiB |   4042 MiB |
|       from small pool |   1165 MiB |   1167 MiB |   1290 MiB |    125 MiB |
|---------------------------------------------------------------------------|
| Non-releasable memory |  19507 MiB |  20019 MiB |   8804 GiB |   8785 GiB |
|       from large pool |  18921 MiB |  19418 MiB |   8540 GiB |   8522 GiB |
|       from small pool |    585 MiB |    600 MiB |    264 GiB |    263 GiB |
|---------------------------------------------------------------------------|
| Allocations           |    2311    |    4187    |    1862 K  |    1859 K  |
|       from large pool |    2241    |    4061    |    1806 K  |    1804 K  |
|       from small pool |      69    |     125    |      55 K  |      55 K  |
|---------------------------------------------------------------------------|
| Active allocs         |    2311    |    4187    |    1862 K  |    1859 K  |
|       from large pool |    2241    |    4061    |    1806 K  |    1804 K  |
|       from small pool |      69    |     125    |      55 K  |      55 K  |
|---------------------------------------------------------------------------|
| GPU reserved segments |     402    |     455    |     631    |     229    |
|       from large pool |     389    |     441    |     612    |     222    |
|       from small pool |      12    |      13    |      18    |       6    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |     187    |     301    |  733001    |  732814    |
|       from large pool |     181    |     291    |  711010    |  710829    |
|       from small pool |       5    |       9    |   21990    |   21984    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""

# torch 1.x printed binary sizes as "MB" and "GB".
LEGACY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |    1064 MB |    4884 MB |     935 GB |     934 GB |
|       from large pool |    1033 MB |    4737 MB |     907 GB |     906 GB |
|       from small pool |      31 MB |     146 MB |      28 GB |      28 GB |
|---------------------------------------------------------------------------|
| Active memory         |    1064 MB |    4884 MB |     935 GB |     934 GB |
|       from large pool |    1033 MB |    4737 MB |     907 GB |     906 GB |
|       from small pool |      31 MB |     146 MB |      28 GB |      28 GB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |   12421 MB |   12421 MB |   16517 MB |    4096 MB |
|       from large pool |   12048 MB |   12048 MB |   16021 MB |    3973 MB |
|       from small pool |     372 MB |     372 MB |     495 MB |     122 MB |
|---------------------------------------------------------------------------|
| Non-releasable memory |   11161 MB |   11673 MB |  532479 MB |  521318 MB |
|       from large pool |   10826 MB |   11323 MB |  516505 MB |  505678 MB |
|       from small pool |     334 MB |     350 MB |   15974 MB |   15639 MB |
|---------------------------------------------------------------------------|
| Allocations           |    2311    |    4187    |    1862 K  |    1859 K  |
|       from large pool |    2241    |    4061    |    1806 K  |    1804 K  |
|       from small pool |      69    |     125    |      55 K  |      55 K  |
|---------------------------------------------------------------------------|
| Active allocs         |    2311    |    4187    |    1862 K  |    1859 K  |
|       from large pool |    2241    |    4061    |    1806 K  |    1804 K  |
|       from small pool |      69    |     125    |      55 K  |      55 K  |
|---------------------------------------------------------------------------|
| GPU reserved segments |     402    |     455    |     631    |     229    |
|       from large pool |     389    |     441    |     612    |     222    |
|       from small pool |      12    |      13    |      18    |       6    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |     187    |     301    |  733001    |  732814    |
|       from large pool |     181    |     291    |  711010    |  710829    |
|       from small pool |       5    |       9    |   21990    |   21984    |
|===========================================================================|
"""

# memory_summary(device=3, abbreviated=True) of a healthy step: no OOM, little split memory.
HEALTHY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 3                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   3276 MiB |  10137 MiB |   2879 GiB |   2876 GiB |
|---------------------------------------------------------------------------|
| Active memory         |   3276 MiB |  10137 MiB |   2879 GiB |   2876 GiB |
|---------------------------------------------------------------------------|
| Requested memory      |   3246 MiB |  10107 MiB |   2876 GiB |   2873 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  10752 MiB |  10752 MiB |  14848 MiB |   4096 MiB |
|---------------------------------------------------------------------------|
| Non-releasable memory |  92160 KiB | 616448 KiB |   1599 GiB |   1599 GiB |
|---------------------------------------------------------------------------|
| Allocations           |    2311    |    4187    |    1862 K  |    1859 K  |
|---------------------------------------------------------------------------|
| Active allocs         |    2311    |    4187    |    1862 K  |    1859 K  |
|---------------------------------------------------------------------------|
| GPU reserved segments |     402    |     455    |     631    |     229    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |     187    |     301    |  733001    |  732814    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""

# memory_summary(device=2, abbreviated=True) at an OOM: nearly all reserved memory is live.
FULL = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 2                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 2         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  78028 MiB |  79769 MiB |  68579 GiB |  68503 GiB |
|---------------------------------------------------------------------------|
| Active memory         |  78028 MiB |  79769 MiB |  68579 GiB |  68503 GiB |
|---------------------------------------------------------------------------|
| Requested memory      |  77998 MiB |  79739 MiB |  68503 GiB |  68427 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  79872 MiB |  80179 MiB |  84275 MiB |   4403 MiB |
|---------------------------------------------------------------------------|
| Non-releasable memory | 421888 KiB |    924 MiB |  38099 GiB |  38099 GiB |
|---------------------------------------------------------------------------|
| Allocations           |    2311    |    4187    |    1862 K  |    1859 K  |
|---------------------------------------------------------------------------|
| Active allocs         |    2311    |    4187    |    1862 K  |    1859 K  |
|---------------------------------------------------------------------------|
| GPU reserved segments |     402    |     455    |     631    |     229    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |     187    |     301    |  733001    |  732814    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""

OOM_2X = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
    "capacity of 79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this "
    "process has 78.07 GiB memory in use. Of the allocated memory 75.82 GiB is allocated by "
    "PyTorch, and 1.61 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
OOM_LEGACY = (
    "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 23.69 GiB total "
    "capacity; 20.84 GiB already allocated; 1.08 GiB free; 21.53 GiB reserved in total by "
    "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)
# The line the fragmented table was printed for: its numbers are cut off in the paste.
OOM_CUT = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a"


def prefixed(rank: int, text: str) -> str:
    return "".join(f"[rank{rank}]:{line}\n" for line in text.splitlines())


def signals_of(tmp_path: Path, name: str, text: str, signature: str) -> list[dict[str, object]]:
    path = tmp_path / name
    path.write_text(text)
    return [s.fields for s in scan_file(path).signals if s.signature == signature]


def run(tmp_path: Path, files: dict[str, str]) -> Report:
    return analyze_files(tmp_path, files, symptom="oom")


def causes(report: Report) -> dict[str, float]:
    return {h.cause_id: h.confidence for h in report.hypotheses}


def step_lines(report: Report) -> int:
    """How many per-step memory lines the scan kept: a negative case must have read them."""
    return sum(1 for e in report.evidence if e.id.endswith(("_usage", "memory.summary")))


# --- memory_summary() tables ---------------------------------------------------------------


def test_a_summary_table_reads_as_one_line_of_the_allocator_counters(tmp_path: Path) -> None:
    (fields,) = signals_of(tmp_path, "rank1.log", prefixed(1, FRAGMENTED), "memory.summary")
    assert fields["device"] == 0
    assert (fields["num_ooms"], fields["num_alloc_retries"]) == (1, 4)
    assert fields["allocated"] == 18032 * MiB and fields["peak_allocated"] == 38297 * MiB
    assert fields["reserved"] == 38840 * MiB
    assert fields["inactive_split"] == 19507 * MiB
    assert fields["segments"] == 402 and fields["allocations"] == 2311


def test_torch_1_sizes_in_mb_are_binary(tmp_path: Path) -> None:
    # fairseq logs the table after its logger prefix; the rest of it follows unprefixed.
    text = "2021-03-04 10:12:50 | WARNING | fairseq.trainer | " + LEGACY
    (fields,) = signals_of(tmp_path, "train.log", text, "memory.summary")
    assert fields["allocated"] == 1064 * MiB
    assert fields["reserved"] == 12421 * MiB
    assert fields["inactive_split"] == 11161 * MiB


def test_a_table_cut_short_keeps_the_rows_it_has() -> None:
    lines = FRAGMENTED.splitlines()
    table = SummaryTable(lines[1])
    for line in lines[2:22]:  # up to the reserved memory rows
        assert table.feed(line)
    assert not table.feed("Traceback (most recent call last):")
    text = table.text()
    assert text is not None
    (match,) = [f for s, f in signatures.matches(text) if s.name == "memory.summary"]
    assert match["reserved"] == 38840 * MiB
    assert "inactive_split" not in match


def test_the_title_line_alone_is_no_summary() -> None:
    title = FRAGMENTED.splitlines()[1]
    assert not [s for s, _ in signatures.matches(title) if s.name == "memory.summary"]


def test_a_fragmented_summary_at_the_oom_is_fragmentation(tmp_path: Path) -> None:
    log = prefixed(1, FRAGMENTED) + f"[rank1]:{OOM_CUT}\n"
    report = run(tmp_path, {"rank1.log": log})
    found = hypothesis(report, "oom.fragmentation")
    assert report.hypotheses[0].cause_id == "oom.fragmentation"
    assert found.ranks == [1]
    assert found.confidence == pytest.approx(0.65)  # split memory and cudaMalloc retries
    assert "retry 4 allocations" in found.summary
    assert any(e.endswith("memory.summary") for e in found.evidence)


def test_a_full_cache_with_the_failed_request_is_capacity(tmp_path: Path) -> None:
    # The message is cut after the request; the table says the cache had nothing to give.
    log = f"[rank2]:{OOM_CUT}\n" + prefixed(2, FULL)
    report = run(tmp_path, {"rank2.log": log})
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("oom.capacity", [2])
    assert top.confidence >= 0.7
    assert "76.20 GiB live of 78.00 GiB reserved when a 2.00 GiB request failed" in top.summary
    assert "oom.fragmentation" not in causes(report)


def test_every_rank_reporting_device_0_is_not_a_shared_gpu(tmp_path: Path) -> None:
    # memory_summary() reports the current device: 0 on every rank under per-rank
    # CUDA_VISIBLE_DEVICES, so the index says nothing about where the memory lives.
    files = {f"rank{r}.log": prefixed(r, FRAGMENTED) + f"[rank{r}]:{OOM_CUT}\n" for r in (0, 1)}
    report = run(tmp_path, files)
    assert report.hypotheses[0].cause_id == "oom.fragmentation"
    assert "oom.same_device" not in causes(report)


def test_a_summary_of_a_healthy_step_is_no_oom_evidence(tmp_path: Path) -> None:
    busy = HEALTHY.replace("92160 KiB", "  8192 MiB")  # lots of split memory, still no OOM
    report = run(tmp_path, {"rank3.log": prefixed(3, busy)})
    assert step_lines(report) == 1
    assert "oom.fragmentation" not in causes(report)


# --- per-step memory lines: the signatures ----------------------------------------------------

# torchtitan's metrics line with its Color codes (red, green, orange, turquoise, ...).
TITAN = (
    "\x1b[31mstep: {step:2}  \x1b[32mloss: {loss:7.4f}  "
    "\x1b[38;2;180;60;0mgrad_norm: {norm:7.4f}  "
    "\x1b[38;2;54;234;195mmemory: {mem:5.2f}GiB({pct:.2f}%)  \x1b[34mtps: {tps:,}  "
    "\x1b[36mtflops: {tflops:,.2f}  \x1b[35mmfu: {mfu:.2f}%\x1b[39m"
)


def titan(step: int, mem: float) -> str:
    line = TITAN.format(
        step=step, loss=8.2 - step / 100, norm=1.1, mem=mem, pct=mem / 94.99 * 100,
        tps=3104, tflops=178.03, mfu=18.0,
    )  # fmt: skip
    return f"[titan] 2025-03-02 14:{step // 60:02d}:{step % 60:02d},118 - root - INFO - {line}"


def deepspeed(step: int, ma: float) -> list[str]:
    stamp = f"[2024-05-01 10:{step // 60:02d}:{step % 60:02d},{step:03d}] [INFO]"
    return [
        f"{stamp} [utils.py:781:see_memory_usage] step {step} after optimizer step",
        f"{stamp} [utils.py:782:see_memory_usage] MA {ma:.2f} GB         "
        f"Max_MA {ma + 4.1:.2f} GB         CA {ma + 5.0:.2f} GB         Max_CA {round(ma + 5)} GB ",
        f"{stamp} [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = 61.02 GB, "
        "percent = 12.1%",
    ]


def mmengine(iteration: int, memory_mb: int) -> str:
    return (
        f"05/14 09:{iteration // 60 % 60:02d}:{iteration % 60:02d} - mmengine - INFO - "
        f"Epoch(train)  [1][{iteration:4d}/7330]  base_lr: 2.0000e-02 lr: 2.0000e-02  eta: "
        f"1 day, 2:21:07  time: 0.5316  data_time: 0.0127  memory: {memory_mb}  grad_norm: "
        "3.1226  loss: 1.2011  loss_rpn_cls: 0.0761"
    )


def homegrown(step: int, allocated: float) -> str:
    return (
        f"2024-11-02 08:15:{step % 60:02d} INFO train.py:141 - Epoch 0 | step {step} | "
        f"loss 2.3142 | memory_allocated: {allocated:.2f} GB | memory_reserved: "
        f"{allocated + 2:.2f} GB"
    )


@pytest.mark.parametrize(
    ("line", "name", "expected"),
    [
        (titan(10, 28.96), "memory.step_usage", {"step": 10, "memory": int(28.96 * GiB)}),
        (deepspeed(5, 20.5)[1], "memory.deepspeed_usage", {"allocated": int(20.5 * GiB)}),
        (mmengine(50, 3534), "memory.mm_usage", {"step": 50, "peak_allocated": 3534 * MiB}),
        (
            "2023-02-01 10:11:12,000 - mmdet - INFO - Epoch [1][50/7330]\tlr: 1.998e-03, eta: "
            "1 day, 9:08:34, time: 0.651, data_time: 0.052, memory: 4521, loss_rpn_cls: 0.5423",
            "memory.mm_usage",
            {"step": 50, "peak_allocated": 4521 * MiB},
        ),
        (
            "[03/05 17:24:43 d2.utils.events]:  eta: 13:45:27  iter: 19  total_loss: 2.174  "
            "loss_cls: 0.7261  time: 0.4212  data_time: 0.0213  lr: 0.00039962  max_mem: 2873M",
            "memory.step_usage",
            {"step": 19, "memory": 2873 * MiB},
        ),
        (
            homegrown(120, 10.5),
            "memory.step_usage",
            {"step": 120, "allocated": int(10.5 * GiB), "reserved": int(12.5 * GiB)},
        ),
        (
            "Step 40 | loss:1.4213085174560547 lr:2e-05 tokens_per_second_per_gpu:1520.53 "
            "peak_memory_active:17.91 peak_memory_alloc:17.91 peak_memory_reserved:19.82 ",
            "memory.torchtune_usage",
            {"step": 40, "peak_allocated": 17_910_000_000, "peak_reserved": 19_820_000_000},
        ),
        (
            "iteration 300: torch.cuda.memory_allocated()=10.20GB max_memory_reserved=14000MB",
            "memory.step_usage",
            {"step": 300, "allocated": int(10.2 * GiB), "peak_reserved": 14000 * MiB},
        ),
    ],
)
def test_step_memory_lines(line: str, name: str, expected: dict[str, object]) -> None:
    found = {s.name: (s, f) for s, f in signatures.matches(line)}
    assert name in found, line
    sig, fields = found[name]
    assert any(anchor in line for anchor in sig.anchors)
    assert {k: fields.get(k) for k in expected} == expected


@pytest.mark.parametrize(
    "line",
    [
        # no separator after "mem": every step line of a training log would be a scan hit
        "step 4100 | loss 2.3091 | lr 2.994e-04 | 146,112 tok/s | mem 62.4 GB",
        # a size but no step on the line
        "Peak Memory: 10.25 GB",
        "max_steps: 1000, memory: 10 GB",
        # DeepSpeed's host memory line
        "[utils.py:789:see_memory_usage] CPU Virtual Memory:  used = 61.02 GB, percent = 12.1%",
        # mmengine's validation lines
        "Epoch(val)  [1][ 50/500]    eta: 0:01:01  time: 0.1271  data_time: 0.0021  memory: 812",
    ],
)
def test_lines_that_are_not_step_memory(line: str) -> None:
    names = {s.name for s, _ in signatures.matches(line)}
    assert not names & {"memory.step_usage", "memory.mm_usage", "memory.deepspeed_usage"}


# --- per-step memory lines: the leak rule -------------------------------------------------


def test_memory_rising_every_step_until_the_oom_is_a_leak(tmp_path: Path) -> None:
    steps = [1, *range(10, 150, 10)]
    files = {
        f"rank{r}.log": "".join(
            f"[rank{r}]:{titan(step, 31.2 + 3.4 * i + r * 0.05)}\n" for i, step in enumerate(steps)
        )
        for r in (0, 1)
    }
    files["rank1.log"] += f"[rank1]:{OOM_2X}\n"
    report = run(tmp_path, files)
    leak = hypothesis(report, "oom.leak")
    assert leak.ranks == [0, 1]
    assert 0.6 <= leak.confidence <= 0.7
    assert "rank 1" in leak.summary.lower()  # the rank that ran out leads
    assert "step 1 " in leak.summary and "step 140" in leak.summary
    assert "oom.capacity" in causes(report)
    assert report.hypotheses[0].cause_id == "oom.leak"  # growth seen first outranks "too big"


def test_deepspeed_see_memory_usage_every_step(tmp_path: Path) -> None:
    lines = [line for step in range(1, 11) for line in deepspeed(step, 18.2 + 0.9 * step)]
    report = run(tmp_path, {"train.log": "\n".join([*lines, OOM_LEGACY])})
    leak = hypothesis(report, "oom.leak")
    assert 0.6 <= leak.confidence <= 0.7
    # see_memory_usage prints no step: the lines say where
    assert "allocated memory rose from 19.10 GiB at line 2 to 27.20 GiB at line 29" in leak.summary


def test_mmengine_peak_memory_rising_is_a_leak(tmp_path: Path) -> None:
    lines = [mmengine(50 * i, 3534 + 260 * i) for i in range(1, 15)]
    report = run(tmp_path, {"rank0.log": "\n".join([*lines, OOM_LEGACY])})
    leak = hypothesis(report, "oom.leak")
    assert leak.ranks == [0]
    assert "peak allocated memory" in leak.summary


def test_a_long_log_keeps_its_first_and_last_lines_and_still_shows_the_leak(
    tmp_path: Path,
) -> None:
    lines = [homegrown(step, 9.0 + 0.045 * step) for step in range(1, 401)]
    report = run(tmp_path, {"rank2.log": prefixed(2, "\n".join([*lines, OOM_2X]))})
    leak = hypothesis(report, "oom.leak")
    assert leak.ranks == [2]
    assert "step 400" in leak.summary


def aggregated(report: Report) -> int:
    """The lines the scan took by the run (counted in C, not read line by line)."""
    return sum(int(e.data.get("aggregated", 0)) for e in report.evidence if e.kind == "log_file")


def test_a_training_log_of_memory_every_step_is_counted_by_the_run_and_shows_the_leak(
    tmp_path: Path,
) -> None:
    """torchtitan prints its memory every step: 1,200 such lines are taken by the run (a
    series per writer, its first and last lines read), and the rise still shows."""
    lines = [titan(step, 20.0 + step * 0.045) for step in range(1, 1_201)]
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join([*lines, OOM_2X]))})
    assert aggregated(report) == 1_200 and step_lines(report) == 15
    leak = hypothesis(report, "oom.leak")
    assert leak.ranks == [0] and "step 1200" in leak.summary


def test_a_failure_line_that_names_memory_amid_the_steps_is_still_read(tmp_path: Path) -> None:
    lines = [titan(step, 40.0) for step in range(1, 2_001)]
    lines.insert(1_000, "RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0."
                 " DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736"
                 " bytes. Error code 12 (Cannot allocate memory)")  # fmt: skip
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join(lines))})
    assert report.hypotheses[0].cause_id == "oom.host"


def test_a_nan_loss_on_the_step_lines_the_run_counted_is_still_read(tmp_path: Path) -> None:
    """torchtitan prints the loss on the same line as the memory: when it turns to NaN, the
    step lines the run counted and kept are read for it too."""
    lines = [titan(step, 40.0) for step in range(1, 2_001)]
    lines[-5:] = [re.sub(r"loss: -?[\d.]+", "loss:      nan", line) for line in lines[-5:]]
    assert "loss:      nan" in lines[-1]
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join(lines))})
    assert aggregated(report) == 2_000
    top = report.hypotheses[0]
    assert top.cause_id == "wrong.nan" and "step: 1996" in top.summary, top.summary


def test_warm_up_then_a_plateau_is_not_a_leak(tmp_path: Path) -> None:
    # Optimizer state and the cache fill the first steps; then memory stays flat until a
    # long batch runs out.
    warm = [31.2, 44.8, 52.3, 55.1, 55.9]
    flat = [56.1, 56.0, 56.2, 56.1, 56.2, 56.1, 56.0, 56.2, 56.1, 56.2]
    steps = range(10, 10 * (len(warm) + len(flat)) + 1, 10)
    lines = [titan(step, mem) for step, mem in zip(steps, warm + flat, strict=True)]
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join([*lines, OOM_2X]))})
    assert step_lines(report) == 15
    assert "oom.leak" not in causes(report)
    assert report.hypotheses[0].cause_id == "oom.capacity"


def test_a_long_plateau_is_not_a_leak(tmp_path: Path) -> None:
    warm = {1: 2.1, 2: 6.8, 3: 8.9}
    lines = [
        homegrown(step, warm.get(step, 9.6 + (0.1 if step % 3 == 0 else 0.0)))
        for step in range(1, 401)
    ]
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join([*lines, OOM_2X]))})
    assert step_lines(report) == 15  # the first 3 and the last 12
    assert "oom.leak" not in causes(report)


def test_one_jump_before_the_oom_is_not_a_leak(tmp_path: Path) -> None:
    values = [20.14, 20.15, 20.15, 20.16, 20.15, 20.16, 20.16, 35.62]
    lines = [homegrown(step, v) for step, v in enumerate(values, 1)]
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join([*lines, OOM_2X]))})
    assert step_lines(report) == 8
    assert "oom.leak" not in causes(report)


def test_memory_going_up_and_down_is_not_a_leak(tmp_path: Path) -> None:
    values = [10.0, 14.5, 11.0, 15.2, 11.6, 16.0, 12.1, 16.9, 12.4, 17.5]
    lines = [homegrown(step, v) for step, v in enumerate(values, 1)]
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join([*lines, OOM_2X]))})
    assert step_lines(report) == 10
    assert "oom.leak" not in causes(report)


def test_growth_without_an_oom_is_a_weak_leak(tmp_path: Path) -> None:
    lines = [homegrown(step, 9.0 + 0.8 * step) for step in range(1, 9)]
    report = run(tmp_path, {"rank0.log": prefixed(0, "\n".join(lines))})
    leak = hypothesis(report, "oom.leak")
    assert leak.confidence == pytest.approx(0.4)


def test_summaries_printed_every_epoch_show_the_leak(tmp_path: Path) -> None:
    tables = [
        HEALTHY.replace("|   3276 MiB |", f"| {3276 + 1400 * epoch:6d} MiB |") for epoch in range(6)
    ]
    log = prefixed(3, "".join(tables)) + f"[rank3]:{OOM_2X}\n"
    report = run(tmp_path, {"rank3.log": log})
    leak = hypothesis(report, "oom.leak")
    assert leak.ranks == [3]
    assert "allocated memory rose from 3.20 GiB" in leak.summary


def test_a_step_lines_memory_fields_are_not_taken_for_a_secret(tmp_path: Path) -> None:
    """The field naming what a step line measured is no `key` the redactor hides."""
    line = titan(10, 40.0)
    report = run(tmp_path, {"rank0.log": prefixed(0, line)})
    fields = [
        e.data["fields"]
        for e in report.evidence
        if e.kind == "log_signal" and e.data.get("signature") == "memory.step_usage"
    ]
    assert fields and "[REDACTED]" not in str(fields) and fields[0]["measure"] == "memory"
