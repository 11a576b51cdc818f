"""Stacks pasted into a report, read as an engineer would: the threads of one dump are one
process, a blank line parts two pasted excerpts, and excerpts that wait in different
collectives are a mismatched collective, not 'cause not visible'.

The excerpt text is from a public report (Lightning-AI/pytorch-lightning, a dev case of
the corpus): two stacks of one hung job, one in Trainer.save_checkpoint's barrier, the
other in a broadcast_object_list, with the frames' source lines partly cut.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO, analyze_files
from triage.readers.logscan import scan_file

CASE = (
    REPO
    / "tests/cases/hang/lightning-modelcheckpoint-rank-zero-only-log-divergent-best-model-hang.json"
)
EXCERPTS = json.loads(CASE.read_text())["evidence"]
C10D = "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py"

#: faulthandler's dump of one process (`faulthandler.dump_traceback(all_threads=True)`):
#: a helper thread (its frames cut by the person who pasted it), then the main thread.
ONE_PROCESS = f"""Fatal Python error: Aborted

Thread 0x00007f2a9c5fe700 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/lib/python3.10/queue.py", line 180 in get

Current thread 0x00007f2b1d3c1740 (most recent call first):
  File "{C10D}", line 3439 in barrier
  File "/home/u/train.py", line 212 in main
  File "/home/u/train.py", line 230 in <module>
"""


def test_excerpts_parted_by_a_blank_line_are_two_stacks(tmp_path: Path) -> None:
    log = tmp_path / "report.txt"
    log.write_text(EXCERPTS)
    outer = [[f.function for f in t.frames][-1] for t in scan_file(log).tracebacks]
    assert outer == ["_save_monitor_checkpoint", "wrapper"]


def test_every_frame_of_an_excerpt_is_read_when_source_lines_are_cut(tmp_path: Path) -> None:
    """`File "` lines one after another (the source line between them cut): each still
    reaches the block parser with the line after it."""
    log = tmp_path / "report.txt"
    log.write_text(EXCERPTS)
    first = scan_file(log).tracebacks[0]
    assert [f.function for f in first.frames][:3] == ["barrier", "wrapper", "barrier"]
    assert "save_checkpoint" in [f.function for f in first.frames]


def test_excerpts_in_different_collectives_are_a_mismatched_collective(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"report.txt": EXCERPTS})
    top = report.hypotheses[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert "barrier and broadcast_object_list" in top.title
    assert 0.3 <= top.confidence < 0.5  # which side is wrong is not in the text


def test_one_excerpt_in_a_collective_is_still_cause_not_visible(tmp_path: Path) -> None:
    first = EXCERPTS.split("\n\n")[0]
    report = analyze_files(tmp_path, {"report.txt": first})
    assert [h.cause_id for h in report.hypotheses] == ["hang.unknown"]


def test_the_threads_of_one_faulthandler_dump_are_one_process(tmp_path: Path) -> None:
    """Its helper thread waiting on a queue is not a rank 'not in the collective'."""
    report = analyze_files(tmp_path, {"rank.log": ONE_PROCESS})
    causes = [h.cause_id for h in report.hypotheses]
    assert "hang.rank_not_in_collective" not in causes
    assert causes[0] == "hang.unknown"
    assert len(report.rank_groups) == 1


def test_stacks_of_unknown_processes_are_not_trusted_like_ranks(tmp_path: Path) -> None:
    """Two dumps that name neither rank nor pid may be one process dumped twice: a verdict
    from them stays under 0.8, and says 'a process of unknown rank', never 'ranks none'."""
    later = ONE_PROCESS.replace("Current thread 0x00007f2b1d3c1740", "Thread 0x00007f2b1d3c1999")
    computing = (
        "Thread 0x00007f2b1d3c1740 (most recent call first):\n"
        '  File "/home/u/train.py", line 50 in slow_eval\n'
        '  File "/home/u/train.py", line 230 in <module>\n'
    )
    report = analyze_files(tmp_path, {"a.log": computing, "b.log": later})
    top = report.hypotheses[0]
    assert top.cause_id == "hang.rank_not_in_collective"
    assert top.confidence < 0.8
    assert "none" not in top.title and "unknown rank" in top.title


def test_a_stack_interrupted_outside_collectives_says_where_the_job_stood(
    tmp_path: Path,
) -> None:
    """Ctrl-C on a job stuck in its DataLoader: the one rank shown waits for its data outside
    any collective (the fault matrix's dataloader_stuck), named weakly at the loop."""
    text = (
        "^CTraceback (most recent call last):\n"
        '  File "/home/u/train.py", line 120, in <module>\n'
        "    main()\n"
        '  File "/home/u/train.py", line 88, in main\n'
        "    for batch in loader:\n"
        '  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line'
        " 630, in __next__\n"
        "    data = self._next_data()\n"
        '  File "/usr/lib/python3.10/multiprocessing/connection.py", line 424, in _poll\n'
        "    r = wait([self], timeout)\n"
        "KeyboardInterrupt\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": text})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_not_in_collective", 0.35)
    assert top.location is not None and (top.location.file, top.location.line) == (
        "/home/u/train.py",
        88,
    )
    assert "waiting for its data in __next__" in top.summary


#: py-spy prints a thread without a Python name as `Thread TID (active)`, no `: "name"`
#: (huggingface/accelerate#3104: a ZeRO-3 worker thread parked in an all-gather).
UNNAMED_THREAD = """Thread 4079 (active)
    all_gather_into_tensor (torch/distributed/distributed_c10d.py:2709)
    wrapper (torch/distributed/c10d_logger.py:72)
    all_gather_into_tensor (deepspeed/comm/torch.py:219)
    _fn (torch/_dynamo/eval_frame.py:489)
    all_gather_into_tensor (deepspeed/comm/comm.py:305)
"""


def test_a_py_spy_thread_without_a_name_is_a_stack(tmp_path: Path) -> None:
    log = tmp_path / "dump.txt"
    log.write_text(UNNAMED_THREAD)
    [record] = scan_file(log).tracebacks
    assert record.dump and "all_gather_into_tensor" in {f.function for f in record.frames}
    report = analyze_files(tmp_path, {"report.txt": UNNAMED_THREAD})
    assert [h.cause_id for h in report.hypotheses] == ["hang.unknown"]
