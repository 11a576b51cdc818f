"""An nvidia-smi table with every GPU at 100% and nothing failed: the honest guess is ranks
spinning in a collective, weaker than any reading of a failure."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

ROW = (
    "|   {gpu}  NVIDIA A100-SXM...  On   | 00000000:0{gpu}:00.0 Off |                    0 |\n"
    "| N/A   45C    P0   120W / 400W |  35000MiB / 81920MiB |    {util}%      Default |\n"
    "|                               |                      |             Disabled |\n"
    "+-------------------------------+----------------------+----------------------+\n"
)


def table(*utils: int) -> str:
    """nvidia-smi 525's table, one row per GPU at the given utilisation."""
    head = (
        "| NVIDIA-SMI 525.85.12    Driver Version: 525.85.12    CUDA Version: 12.0     |\n"
        "|===============================+======================+======================|\n"
    )
    return head + "".join(ROW.format(gpu=i, util=u) for i, u in enumerate(utils))


def test_every_gpu_busy_with_nothing_failed_is_a_weak_hang(tmp_path: Path) -> None:
    found = analyze_files(tmp_path, {"smi.txt": table(100, 100, 99, 100)}).hypotheses
    assert [(h.cause_id, h.confidence) for h in found] == [("hang.unknown", 0.15)]
    assert "all 4 GPUs" in found[0].title and "stacks of every rank" in found[0].fix


def test_an_idle_gpu_is_no_spin(tmp_path: Path) -> None:
    assert analyze_files(tmp_path, {"smi.txt": table(100, 0)}).hypotheses == []


def test_a_failure_beside_the_table_is_read_instead(tmp_path: Path) -> None:
    text = table(100, 100) + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
    rules = [h.rule_id for h in analyze_files(tmp_path, {"smi.txt": text}).hypotheses]
    assert "logs.gpus_spin" not in rules


def test_a_named_symptom_of_another_family_sets_it_aside(tmp_path: Path) -> None:
    found = analyze_files(tmp_path, {"smi.txt": table(100, 100)}, symptom="oom").hypotheses
    assert "logs.gpus_spin" not in [h.rule_id for h in found]
