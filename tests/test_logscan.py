"""The scanner on real log shapes: prefixes, launcher reports, stacks, long lines."""

from __future__ import annotations

from pathlib import Path

from triage.readers.log_prefilter import scan_range
from triage.readers.logscan import learn_ranks, scan_file

ELASTIC_REPORT = """\
[default1]:[rank1]: Traceback (most recent call last):
[default1]:[rank1]:   File "/work/job/train.py", line 40, in <module>
[default1]:[rank1]:     main()
[default1]:[rank1]:   File "/work/job/train.py", line 33, in main
[default1]:[rank1]:     loss = model(x).sum()
[default1]:[rank1]: ValueError: boom
E1121 03:12:00.123000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 4321) of binary: /usr/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-21_03:12:00
  host      : node7
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 4320)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4320
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_03:12:00
  host      : node7
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 4321)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

FAILED_COLLECTIVE = """\
[rank3]:[E508 07:35:59.440171617 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: {trailing}
#0 broadcast from /opt/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:2968
#1 wrapper from /opt/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83
#2 sync_step from /work/job/train.py:88
#3 <module> from /work/job/train.py:120
[rank3]:[E508 07:35:59.440271515 ProcessGroupNCCL.cpp:698] [Rank 3] To avoid data inconsistency, we are taking the entire process down.
""".format(trailing=" ")  # torch ends that line with a space; ruff strips literal ones

PYSPY_LOCALS = """\
Thread 4101 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2501)
        Arguments:
            tensor: <Tensor at 0x7f00>
            op: <RedOpType at 0x7f01>
    wrapper (torch/distributed/c10d_logger.py:83)
    step (/work/job/train.py:21)
        Locals:
            batch: 3
    <module> (/work/job/train.py:30)
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_launcher_report_names_each_failed_rank_and_the_first_failure(tmp_path: Path) -> None:
    result = scan_file(_write(tmp_path, "console.log", ELASTIC_REPORT))
    failed = {
        s.fields["rank"]: s.fields for s in result.signals if s.signature == "elastic.child_failed"
    }
    assert failed[0]["exitcode"] == -9 and failed[0]["first"] is False
    assert (
        failed[1]["exitcode"] == 1 and failed[1]["first"] is True and failed[1]["host"] == "node7"
    )
    (record,) = [t for t in result.tracebacks if t.exception == "ValueError"]
    assert record.rank == 1 and record.local_rank == 1  # stacked torchrun prefixes both read
    assert record.user_frame is not None and record.user_frame.line == 33


def test_local_ranks_become_ranks_through_the_launcher_report(tmp_path: Path) -> None:
    text = (
        "[default1]:train.py: error: unrecognized arguments: --local-rank=1\n"
        + ELASTIC_REPORT.split("\n", 6)[6]
    )
    result = scan_file(_write(tmp_path, "console.log", text))
    learn_ranks([result])
    (unrecognized,) = [s for s in result.signals if "unrecognized" in s.text]
    assert unrecognized.local_rank == 1 and unrecognized.rank == 1


def test_a_block_opened_after_another_anchor_on_its_line_keeps_its_lines(tmp_path: Path) -> None:
    """The line's first anchor (`ERROR`, a generic error line) asks for no context; the block
    anchor after it on the same line does."""
    text = FAILED_COLLECTIVE.replace("Stack trace of", "ERROR Stack trace of", 1)
    (record,) = scan_file(_write(tmp_path, "rank3.log", text)).tracebacks
    assert [f.function for f in record.frames] == ["broadcast", "wrapper", "sync_step", "<module>"]


def test_stack_of_the_failed_collective_is_a_dump_of_that_rank(tmp_path: Path) -> None:
    result = scan_file(_write(tmp_path, "rank3.log", FAILED_COLLECTIVE))
    (record,) = result.tracebacks
    assert record.dump and record.rank == 3
    assert [f.function for f in record.frames][:3] == ["broadcast", "wrapper", "sync_step"]
    assert record.user_frame is not None and record.user_frame.line == 88


def test_py_spy_locals_do_not_cut_the_stack(tmp_path: Path) -> None:
    result = scan_file(_write(tmp_path, "dump.txt", PYSPY_LOCALS))
    (record,) = result.tracebacks
    assert [f.function for f in record.frames] == ["all_reduce", "wrapper", "step", "<module>"]


def test_a_failure_at_the_end_of_a_huge_progress_bar_line_is_kept(tmp_path: Path) -> None:
    bar = "\r".join(f"{n}%|{'#' * (n // 5)}| {n}/100" for n in range(100)) * 400
    tail = "\rRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    result = scan_file(_write(tmp_path, "rank0.log", bar + tail))
    assert any("Tried to allocate 2.00 GiB" in s.text for s in result.signals)


def test_binary_garbage_and_a_cut_last_line_are_read_without_error(tmp_path: Path) -> None:
    path = tmp_path / "rank2.log"
    path.write_bytes(
        b"\x00\xff\xfe" * 5000
        + b'\nTraceback (most recent call last):\n  File "/x.py", line 3, in f\n'
    )
    result = scan_file(path)
    assert result.tracebacks and result.tracebacks[0].rank == 2


def test_a_traceback_forced_by_ctrl_c_is_a_stack_dump(tmp_path: Path) -> None:
    text = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/work/job/train.py", line 30, in main\n'
        "[rank1]:     dist.barrier()\n"
        '[rank1]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/'
        'distributed_c10d.py", line 4150, in barrier\n'
        "[rank1]:     work.wait()\n"
        "[rank1]: KeyboardInterrupt\n"
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "/work/job/train.py", line 31, in main\n'
        "[rank2]:     raise ValueError('bad batch')\n"
        "[rank2]: ValueError: bad batch\n"
    )
    result = scan_file(_write(tmp_path, "console.log", text))
    dumps = {t.rank: t.dump for t in result.tracebacks}
    assert dumps == {1: True, 2: False}


# `py-spy dump --locals --pid` (py-spy 0.4, text) of rank 1 of
# triage/scenarios/jobs/mismatched_collective.py waiting in all_reduce under gloo.
PYSPY_HEADER = """\
Process 4321: /work/main/.venv/bin/python /work/main/triage/scenarios/jobs/mismatched_collective.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 4321 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:4181)
        Arguments:
            tensor: <Tensor at 0x7f6c11680460>
            op: <torch._C._distributed_c10d.RedOpType at 0x7f6c13867a30>
            group: <torch._C._distributed_c10d.ProcessGroup at 0x7f6cc9f0f2f0>
            async_op: False
        Locals:
            relevant_args: (<Tensor at 0x7f6c11680460>)
            opts: <torch._C._distributed_c10d.AllreduceOptions at 0x7f6bfc6f4030>
            work: <torch._C._distributed_c10d.Work at 0x7f6bfc8a22f0>
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
        Locals:
            args: (<Tensor at 0x7f6c11680460>)
            kwargs: {"op": <torch._C._distributed_c10d.RedOpType at 0x7f6c13867a30>}
    average_gradients (mismatched_collective.py:26)
        Arguments:
            model: <Sequential at 0x7f6c11805510>
        Locals:
            world: 2
            p: <Parameter at 0x7f6c115c96d0>
    main (mismatched_collective.py:54)
        Locals:
            rank: 1
            step: 3
    <module> (mismatched_collective.py:62)
"""


def test_py_spy_header_names_the_dumps_process(tmp_path: Path) -> None:
    result = scan_file(_write(tmp_path, "dump.txt", PYSPY_HEADER))
    (record,) = result.tracebacks
    assert record.pid == 4321 and record.rank is None and record.dump
    assert [f.function for f in record.frames][2:] == ["average_gradients", "main", "<module>"]


def test_the_launcher_report_ties_a_py_spy_dump_to_its_rank(tmp_path: Path) -> None:
    """The dump names no rank, but its pid is the one torchelastic reports for rank 1."""
    from triage.registry import REGISTRY

    dump = _write(tmp_path, "hung.txt", PYSPY_HEADER)
    report = _write(tmp_path, "console.log", ELASTIC_REPORT)
    results = [scan_file(dump), scan_file(report)]
    learn_ranks(results)
    assert [(t.pid, t.rank) for t in results[0].tracebacks] == [(4321, 1)]

    run = REGISTRY.run("scan_logs", {"log_files": [str(dump), str(report)]})
    stacks = [e for e in run.evidence if e.kind == "stack"]
    assert [(e.rank, e.data["pid"], e.data["op"]) for e in stacks] == [(1, 4321, "all_reduce")]


def test_a_py_spy_dump_without_its_header_takes_the_main_thread_id_as_pid(
    tmp_path: Path,
) -> None:
    (record,) = scan_file(_write(tmp_path, "dump.txt", PYSPY_LOCALS)).tracebacks
    assert record.pid == 4101  # Linux: py-spy prints the main thread's OS id, the pid


def test_py_spy_hex_thread_ids_are_read(tmp_path: Path) -> None:
    """Without a native thread id (macOS) py-spy prints the pthread id as `{:#X}`."""
    text = PYSPY_HEADER.replace(
        'Thread 4321 (idle): "MainThread"', 'Thread 0x1F7D43A80 (idle): "MainThread"'
    )
    (record,) = scan_file(_write(tmp_path, "dump.txt", text)).tracebacks
    assert record.pid == 4321 and record.frames[0].function == "all_reduce"


def test_colour_escapes_are_dropped_from_hit_lines(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(
        "\x1b[32m[rank0]:RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\x1b[39m\n"
    )
    hits = scan_range(str(log), 0, log.stat().st_size).hits
    assert hits == [
        (1, "[rank0]:RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", True)
    ]


def test_grep_output_keeps_the_nccl_prefix_of_each_line(tmp_path: Path) -> None:
    """`grep -r NCCL logs/` puts the file name before NCCL's `host:pid:tid [dev]` prefix."""
    text = (
        "LOG1.0.txt:learnfair062:32615:32615 [0] NCCL INFO Broadcast: opCount 0 sendbuff "
        "0x7f88e4000000 recvbuff 0x7f88e4000000 count 25503912 datatype 0 op 0 root 0 comm "
        "0x7f88d8002f70 [nranks=5] stream 0x55d3c5b3e0a0\n"
    )
    (coll,) = scan_file(_write(tmp_path, "grep.txt", text)).signals
    assert (coll.host, coll.pid) == ("learnfair062", 32615)
    assert coll.text.startswith("NCCL INFO Broadcast")


def test_every_file_knows_its_rank_and_where_it_stops(tmp_path: Path) -> None:
    quiet = scan_file(_write(tmp_path, "rank3.log", "step 1\nstep 2 loss 0.5\n\n"))
    assert (quiet.rank, quiet.last_line, quiet.signals) == (3, "step 2 loss 0.5", [])
    report = scan_file(_write(tmp_path, "console.log", ELASTIC_REPORT))
    assert report.rank is None  # a launcher's report names several ranks
