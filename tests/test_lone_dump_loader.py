"""One process's stack dump that waits for its data, with no collective on any thread: the
rank the others wait for (a hint at 0.35); a dump inside a collective is no such hint."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

LOADER = """\
Thread 0x00007f3b2c7fe700 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 320 in wait
  File "/usr/lib/python3.10/queue.py", line 171 in get
  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/_utils/pin_memory.py", line 28 in do_one_step

Thread 0x00007f3b3e0a5740 (most recent call first):
  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1294 in _get_data
  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1333 in _next_data
  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 631 in __next__
  File "/home/u/train.py", line 60 in train_epoch
  File "/home/u/train.py", line 99 in <module>
"""


def test_a_lone_dump_waiting_for_data_is_the_rank_elsewhere(tmp_path: Path) -> None:
    top = analyze_files(tmp_path, {"hung.txt": LOADER}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_not_in_collective", 0.35)
    assert top.location is not None and (top.location.file, top.location.line) == (
        "/home/u/train.py",
        60,
    )


def test_a_lone_dump_in_a_collective_is_no_loader_hint(tmp_path: Path) -> None:
    text = LOADER.replace(
        '  File "/home/u/train.py", line 60 in train_epoch\n',
        '  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py",'
        " line 1536 in all_reduce\n"
        '  File "/home/u/train.py", line 60 in train_epoch\n',
    ).replace("dataloader.py", "other.py")
    report = analyze_files(tmp_path, {"hung.txt": text})
    assert all(h.confidence < 0.35 for h in report.hypotheses if h.cause_id.startswith("hang."))
