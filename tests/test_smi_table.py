"""nvidia-smi's table pasted into a report: several processes of one job holding memory on
one GPU is oom.same_device; every process's empty context on every GPU is not.

Both tables are verbatim from public reports: yyliu01/PS-MT#20 (the ranks of GPUs 6-8 also
hold 1.4 GB each on GPU 5) and pytorch/pytorch#64130 (each rank lists on every GPU, with
0 MiB on all but its own).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, analyze_files

PS_MT = (REPO / "tests/rules/logs.smi_shared_gpu/ps_mt_first_gpu/nvidia-smi.txt").read_text()
EMPTY_CONTEXTS = """\
|    0   N/A  N/A    331903      C   ...py3.6-torch1.8/bin/python     1733MiB |
|    0   N/A  N/A    331904      C   ...py3.6-torch1.8/bin/python        0MiB |
|    0   N/A  N/A    331905      C   ...py3.6-torch1.8/bin/python        0MiB |
|    0   N/A  N/A    331906      C   ...py3.6-torch1.8/bin/python        0MiB |
|    0   N/A  N/A    331907      C   ...py3.6-torch1.8/bin/python        0MiB |
|    0   N/A  N/A    331908      C   ...py3.6-torch1.8/bin/python        0MiB |
|    0   N/A  N/A    331909      C   ...py3.6-torch1.8/bin/python        0MiB |
|    0   N/A  N/A    331910      C   ...py3.6-torch1.8/bin/python        0MiB |
|    1   N/A  N/A    331903      C   ...py3.6-torch1.8/bin/python        0MiB |
|    1   N/A  N/A    331904      C   ...py3.6-torch1.8/bin/python     1717MiB |
|    1   N/A  N/A    331905      C   ...py3.6-torch1.8/bin/python        0MiB |
"""
OOM = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"


def test_ranks_holding_memory_on_the_first_gpu_share_a_device(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"nvidia-smi.txt": PS_MT})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("oom.same_device", 0.45)
    assert "26599, 26600, 26601 also hold memory on GPU 5" in top.summary


def test_with_an_oom_the_shared_gpu_is_the_likely_cause(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"job.log": OOM + PS_MT})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("oom.same_device", 0.7)


def test_empty_contexts_on_every_gpu_are_no_shared_device(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"nvidia-smi.txt": EMPTY_CONTEXTS})
    assert "oom.same_device" not in [h.cause_id for h in report.hypotheses]


def table(rows: list[tuple[int, int, int]]) -> str:
    return "".join(
        f"|    {gpu}     {pid}      C   /usr/bin/python3.6          {mib:>8}MiB |\n"
        for gpu, pid, mib in rows
    )


def test_ranks_with_one_context_each_beside_the_gpus_own_rank_share_it(tmp_path: Path) -> None:
    rows = [(0, 62250, 4903), (0, 62251, 725), (0, 62252, 725), (0, 62253, 731)]
    top = analyze_files(tmp_path, {"smi.txt": table(rows)}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("oom.same_device", 0.45)
    assert "beside process 62250, 3 of them hold the same 731 MiB each" in top.summary


def test_processes_of_different_sizes_on_one_gpu_are_no_contexts(tmp_path: Path) -> None:
    rows = [(0, 62250, 4903), (0, 62251, 725), (0, 62252, 1900), (0, 62253, 300)]
    report = analyze_files(tmp_path, {"smi.txt": table(rows)})
    assert "oom.same_device" not in [h.cause_id for h in report.hypotheses]


PS_STOPPED = (
    "alice     1395  1.7 14.4 89506440 28604880 pts/2 {state} May25 147:37 python train.py\n"
)


def test_a_stopped_process_holding_the_gpu_is_another_processs_memory(tmp_path: Path) -> None:
    text = table([(0, 1395, 25081)]) + PS_STOPPED.format(state="Tl")
    top = analyze_files(tmp_path, {"smi.txt": text}).hypotheses[0]
    assert (top.cause_id, top.rule_id, top.confidence) == (
        "oom.other_process",
        "logs.stopped_gpu_holder",
        0.6,
    )
    assert "state Tl (stopped, owned by alice)" in top.summary


def test_a_running_or_unlisted_process_is_no_stopped_holder(tmp_path: Path) -> None:
    running = table([(0, 1395, 25081)]) + PS_STOPPED.format(state="Rl")
    elsewhere = table([(0, 1396, 25081)]) + PS_STOPPED.format(state="T")
    for name, text in (("running", running), ("elsewhere", elsewhere)):
        (tmp_path / name).mkdir()
        report = analyze_files(tmp_path / name, {"smi.txt": text})
        assert "logs.stopped_gpu_holder" not in [h.rule_id for h in report.hypotheses], name


def test_alike_contexts_whose_gpus_own_row_was_cut_share_it(tmp_path: Path) -> None:
    rows = table([(0, 2695173, 871), (0, 2695174, 871), (0, 2695178, 871)])
    cut = "    0   N/A  N/A   2695181      C   /usr/bin/python3.6        871MiB |\n"
    top = analyze_files(tmp_path, {"smi.txt": rows + cut}).hypotheses[0]
    assert top.cause_id == "oom.same_device"
    assert "4 of them hold the same 871 MiB each" in top.summary


def gpu_table(used_mib: list[int]) -> str:
    """nvidia-smi's GPU section, each GPU's row and its memory line, as driver 410 prints it."""
    return "".join(
        f"|   {gpu}  GeForce RTX 208...  Off  | 00000000:0{gpu + 4}:00.0 Off |"
        "                  N/A |\n"
        f"| 36%   30C    P8    15W / 250W | {mib:>6}MiB / 10989MiB |      0%      Default |\n"
        "+-------------------------------+----------------------+----------------------+\n"
        for gpu, mib in enumerate(used_mib)
    )


def test_a_first_gpu_holding_several_times_the_others_is_the_default_device(
    tmp_path: Path,
) -> None:
    top = analyze_files(tmp_path, {"smi.txt": gpu_table([6520, 897, 897, 901])}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("oom.same_device", 0.4)
    assert top.title == "GPU 0 holds 6,520 MiB, the other GPUs about 897 MiB each"


def test_gpus_holding_alike_or_a_rank_0_with_a_little_more_are_no_shared_device(
    tmp_path: Path,
) -> None:
    for used in ([9800, 9700, 9750, 9800], [10500, 8200, 8150, 8210], [6520, 897, 3100, 900]):
        report = analyze_files(tmp_path, {"smi.txt": gpu_table(used)})
        assert "oom.same_device" not in [h.cause_id for h in report.hypotheses], used
