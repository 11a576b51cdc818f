"""Hangs diagnosed from logs alone: watchdog timeouts, DETAIL fingerprints, per-rank progress,
monitoredBarrier reports, launcher reports and pasted py-spy / faulthandler dumps.

The gloo texts were recorded here (torch 2.15, CPU, `TORCH_DISTRIBUTED_DEBUG=DETAIL
TORCH_CPP_LOG_LEVEL=INFO` where fingerprints show); the small helpers below rebuild the
recorded lines byte for byte, leaving out c10d trace chatter and the `^^^` lines of
tracebacks. NCCL texts are lines from public reports (the issue above each); where a
scenario needs a rank or a number the report did not show, the line is the same torch or
NCCL message with that rank's numbers, and says so.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import analyze_files, requires_torch, triage_cli
from triage.engine import rank as ranked
from triage.models import Finding
from triage.readers import pyspy, signatures
from triage.registry import REGISTRY, EvidenceSet, run_rules, select

DEV = (
    "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided "
    "(default), requires_grad=false (default), pinned_memory=false (default), "
    "memory_format=(nullopt))"
)
SITE = "/work/main/.venv/lib/python3.11/site-packages/torch/distributed"


def fingerprint(seq: int, op: str, shape: str, dtype: str) -> str:
    return (
        f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], "
        f"TensorDtypes={dtype}, {DEV})"
    )


def running(rank: int, clock: str, seq: int, op: str, shape: str, dtype: str) -> str:
    return (
        f"[rank{rank}]:[I1121 {clock} ProcessGroupWrapper.cpp:724] [Rank {rank}] "
        f"Running collective: {fingerprint(seq, op, shape, dtype)}"
    )


def traceback(rank: int, script: str, line: int, code: str, op: str, src: int, call: str) -> str:
    return "\n".join(
        f"[rank{rank}]: {text}"
        for text in (
            "Traceback (most recent call last):",
            f'  File "{script}", line {line}, in <module>',
            f"    {code}",
            f'  File "{SITE}/c10d_logger.py", line 83, in wrapper',
            "    return func(*args, **kwargs)",
            f'  File "{SITE}/distributed_c10d.py", line {src}, in {op}',
            f"    {call}",
        )
    )


def mismatch(rank: int, own: str, peer: int, other: str, aspects: str) -> str:
    return (
        f"[rank{rank}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} "
        f"is running collective: {own}, but Rank {peer} is running collective: {other}."
        f"Collectives differ in the following aspects: {aspects}"
    )


# Three gloo ranks; rank 1 skips an all_reduce of a LongTensor and enters the broadcast
# the others reach next (detail_seq.py: `if rank != 1: dist.all_reduce(...)`).
SEQ_SCRIPT = "/tmp/hangwork/detail_seq.py"
_SEQ_ALLREDUCE = fingerprint(2, "ALLREDUCE", "3", "Long")
_SEQ_BROADCAST = fingerprint(2, "BROADCAST", "73", "Byte")
_SEQ_CLOCKS = {
    0: ("20:57:41.321214069", "20:57:41.342711258", "20:57:41.359584062"),
    1: ("20:57:41.323716321", "20:57:41.342329027", "20:57:41.360701953"),
    2: ("20:57:41.322754220", "20:57:41.343065358", "20:57:41.360065623"),
}


def _seq_log(r: int) -> str:
    skipped = r == 1
    last = ("BROADCAST", "73", "Byte") if skipped else ("ALLREDUCE", "3", "Long")
    call = (
        (11, "dist.broadcast(torch.zeros(73, dtype=torch.uint8), src=0)", "broadcast", 4049,
         "work = group.broadcast([tensor], opts)")
        if skipped
        else (10, "dist.all_reduce(torch.zeros(3, dtype=torch.long))", "all_reduce", 4174,
              "work = group.allreduce([tensor], opts)")
    )  # fmt: skip
    aspects = (
        "  Op type: BROADCASTvs ALLREDUCE  Tensor Tensor shapes: 73vs 3  Tensor Tensor dtypes: "
        "Bytevs Long"
        if skipped
        else "  Op type: ALLREDUCEvs BROADCAST  Tensor Tensor shapes: 3vs 73  Tensor Tensor "
        "dtypes: Longvs Byte"
    )
    own, peer, other = (
        (_SEQ_BROADCAST, 0, _SEQ_ALLREDUCE) if skipped else (_SEQ_ALLREDUCE, 1, _SEQ_BROADCAST)
    )
    clocks = _SEQ_CLOCKS[r]
    lines = [
        running(r, clocks[0], 0, "ALLREDUCE", "4", "Float"),
        running(r, clocks[1], 1, "ALLREDUCE", "4", "Float"),
        running(r, clocks[2], 2, *last),
        traceback(r, SEQ_SCRIPT, *call),
        mismatch(r, own, peer, other, aspects),
    ]
    return "\n".join(lines) + "\n"


DETAIL_SEQ = {f"rank{r}.log": _seq_log(r) for r in range(3)}

# Three gloo ranks in the same all_reduce; rank 2 passes 5 elements, the others 4.
_SHAPE_CLOCKS = {
    0: ("20:57:59.608927686", "20:57:59.616365833"),
    1: ("20:57:59.608692886", "20:57:59.616362483"),
    2: ("20:57:59.608242556", "20:57:59.616555133"),
}
DETAIL_SHAPE = {
    f"rank{r}.log": "\n".join(
        [
            running(r, _SHAPE_CLOCKS[r][0], 0, "ALLREDUCE", "4", "Float"),
            running(r, _SHAPE_CLOCKS[r][1], 1, "ALLREDUCE", "5" if r == 2 else "4", "Float"),
            traceback(
                r,
                "/tmp/hangwork/detail_shape.py",
                8,
                "dist.all_reduce(torch.ones(n))",
                "all_reduce",
                4174,
                "work = group.allreduce([tensor], opts)",
            ),
            mismatch(
                r,
                fingerprint(1, "ALLREDUCE", "5" if r == 2 else "4", "Float"),
                0 if r == 2 else 2,
                fingerprint(1, "ALLREDUCE", "4" if r == 2 else "5", "Float"),
                "  Tensor Tensor shapes: 5vs 4" if r == 2 else "  Tensor Tensor shapes: 4vs 5",
            ),
        ]
    )
    + "\n"
    for r in range(3)
}

# Two gloo ranks: rank 0 broadcasts inside `if rank == 0:`, rank 1 all-reduces a [4, 2]
# tensor in the `else:`. The peer fingerprints are rebuilt from the length check alone
# (SequenceNumber=0OpType=<length as an op>): each rank knows only that the other differs.
_MM_TAIL = (
    "Tensor Tensor dtypes: Floatvs   Tensor Tensor devices: TensorOptions(dtype=float "
    "(default), device=cpu, layout=Strided (default), requires_grad=false (default), "
    "pinned_memory=false (default), memory_format=(nullopt))vs "
)
DETAIL_TWO_RANKS = {
    "rank0.log": traceback(
        0,
        "/tmp/hangwork/mm.py",
        11,
        "dist.broadcast(x, src=0)",
        "broadcast",
        4049,
        "work = group.broadcast([tensor], opts)",
    )
    + "\n"
    + mismatch(
        0,
        fingerprint(3, "BROADCAST", "4", "Float"),
        1,
        "CollectiveFingerPrint(SequenceNumber=0OpType=SCATTER)",
        "\t Sequence number: 3vs 0  Op type: BROADCASTvs SCATTER  Tensor Tensor shapes: 4vs   "
        + _MM_TAIL,
    )
    + "\n",
    "rank1.log": traceback(
        1,
        "/tmp/hangwork/mm.py",
        13,
        "dist.all_reduce(torch.ones(4, 2))",
        "all_reduce",
        4174,
        "work = group.allreduce([tensor], opts)",
    )
    + "\n"
    + mismatch(
        1,
        fingerprint(3, "ALLREDUCE", "4, 2", "Float"),
        0,
        "CollectiveFingerPrint(SequenceNumber=0OpType=GATHER)",
        "\t Sequence number: 3vs 0  Op type: ALLREDUCEvs GATHER  Tensor Tensor shapes: 4 2vs   "
        + _MM_TAIL,
    )
    + "\n",
}

# Three gloo ranks, timeout 5 s; rank 1 sleeps 12 s before the all_reduce the others wait in.
_BUSY_TB = {
    r: traceback(
        r,
        "/tmp/hangwork/detail_busy.py",
        10,
        "dist.all_reduce(x)",
        "all_reduce",
        4181,
        "work.wait()",
    )
    for r in range(3)
}
_CLOSED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed "
    "by peer [127.0.0.1]:{port}. This is typically caused by a remote worker crashing. Check the "
    "logs of the remote worker before reporting an error. GLHF! 🏖️"
)
GLOO_BUSY = {
    "rank0.log": _BUSY_TB[0] + "\n[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/"
    "gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to "
    "complete\n",
    "rank1.log": _BUSY_TB[1] + "\n[rank1]: RuntimeError: " + _CLOSED.format(port=7559) + "\n",
    "rank2.log": _BUSY_TB[2] + "\n[rank2]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/"
    "gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 5000ms for send operation to "
    "complete\n",
}

# The same job with TORCH_DISTRIBUTED_DEBUG=DETAIL: the wrapper's monitoredBarrier names rank 1.
_DETAIL_TB = {
    r: tb.replace("4181, in all_reduce", "4174, in all_reduce").replace(
        "work.wait()", "work = group.allreduce([tensor], opts)"
    )
    for r, tb in _BUSY_TB.items()
}
DETAIL_BUSY = {
    "rank0.log": "[rank0]:[E1121 21:08:37.694176281 ProcessGroupGloo.cpp:2949] [Rank 0]: Rank 1 "
    "failed to pass monitoredBarrier in 5000 ms\n"
    "[rank0]:[E1121 21:08:37.694262151 ProcessGroupGloo.cpp:69] [Rank 0]: Ranks 1 failed to "
    "pass monitoredBarrier in 5000 ms\n"
    + _DETAIL_TB[0]
    + "\n[rank0]: RuntimeError: [Rank 0]: Ranks 1 failed to pass monitoredBarrier in 5000 ms\n",
    "rank1.log": _DETAIL_TB[1]
    + "\n[rank1]: RuntimeError: ProcessGroupWrapper: Monitored Barrier encountered error running "
    f"collective: {fingerprint(1, 'ALLREDUCE', '4', 'Float')}. Error: \n[rank1]: "
    + _CLOSED.format(port=33490)
    + "\n",
    "rank2.log": "[rank2]:[E1121 21:08:37.696400763 ProcessGroupGloo.cpp:69] Rank 2 successfully "
    "reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. "
    "Please check rank 0 logs for faulty rank.\n"
    + _DETAIL_TB[2]
    + "\n[rank2]: RuntimeError: Rank 2 successfully reached monitoredBarrier, but received errors "
    "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n"
    "[rank2]:  Original exception: \n[rank2]: [/__w/pytorch/pytorch/third_party/gloo/gloo/"
    "transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to "
    "complete\n",
}

# faulthandler.dump_traceback_later on rank 0, stuck in a barrier inside save_checkpoint,
# which only rank 0 calls; rank 1's log is not given.
CHECKPOINT_DUMP = f"""\
Timeout (0:00:03)!
Thread 0x00007fb0ac9f2b80 (most recent call first):
  File "{SITE}/distributed_c10d.py", line 6614 in barrier
  File "{SITE}/c10d_logger.py", line 83 in wrapper
  File "/tmp/hangwork/ckpt.py", line 11 in save_checkpoint
  File "/tmp/hangwork/ckpt.py", line 24 in main
  File "/tmp/hangwork/ckpt.py", line 29 in <module>
"""

# `py-spy dump --pid` (text) of the two ranks of triage/scenarios/jobs/mismatched_collective.py.
PY_SPY_MISMATCH = {
    "rank0.txt": """\
Process 29291: /work/main/.venv/bin/python /work/main/triage/scenarios/jobs/mismatched_collective.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 29291 (idle): "MainThread"
    broadcast (torch/distributed/distributed_c10d.py:4055)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    main (mismatched_collective.py:53)
    <module> (mismatched_collective.py:62)
""",
    "rank1.txt": """\
Process 29292: /work/main/.venv/bin/python /work/main/triage/scenarios/jobs/mismatched_collective.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 29292 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:4181)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    average_gradients (mismatched_collective.py:26)
    main (mismatched_collective.py:54)
    <module> (mismatched_collective.py:62)
""",
}

# `py-spy dump --pid` of two gloo ranks with a background thread each: rank 0 (pid 30129)
# waits in all_reduce, rank 1 (pid 30128) sleeps in main and never calls it.
PY_SPY_BUSY = """\
Process 30128: /work/main/.venv/bin/python bg.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 30128 (idle): "MainThread"
    main (bg.py:21)
    <module> (bg.py:25)
Thread 30379 (idle): "heartbeat"
    heartbeat (bg.py:11)
    Thread.run (threading.py:982)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
Process 30129: /work/main/.venv/bin/python bg.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 30129 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:4181)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    main (bg.py:19)
    <module> (bg.py:25)
Thread 30378 (idle): "heartbeat"
    heartbeat (bg.py:11)
    Thread.run (threading.py:982)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
"""

# XPixelGroup/BasicSR#737: every rank timed out in the same all_reduce.
NCCL_SAME_WORK = """\
[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
[rank1]:[E626 06:24:44.906457629 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 808, last enqueued NCCL work: 811, last completed NCCL work: 807.
[rank0]:[E626 06:24:44.159932949 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600030 milliseconds before timing out.
[rank0]:[E626 06:24:44.160366013 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 0] Exception (either an error or timeout) detected by watchdog at work: 808, last enqueued NCCL work: 811, last completed NCCL work: 807.
[rank2]:[E626 06:24:44.173078629 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.
"""

# pytorch/pytorch#118369 (torch 2.1): rank 0 times out in works of several process groups,
# rank 7 in another group's numbering; the numbers are not comparable across groups.
NCCL_MANY_GROUPS = """\
[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25624887 milliseconds before timing out.
[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96117, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625613 milliseconds before timing out.
[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96125, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625593 milliseconds before timing out.
[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64088, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625251 milliseconds before timing out.
"""

# huggingface/accelerate#3861 (validation on rank 0 only): ranks 1 and 2 time out with work
# 22 in flight; rank 0 only observes their dump signal. Its second line is the message torch
# prints on a rank that completed work 21 and never enqueued work 22.
_DUMP_SIGNAL = (
    "and we will try our best to dump the debug info. Last enqueued NCCL work: {enq}, last "
    "completed NCCL work: {done}.This is most likely caused by incorrect usages of collectives, "
    "e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or "
    "the scheduled collective, for some reason, didn't run. Additionally, this can be caused by "
    "GIL deadlock or other reasons such as network errors or bugs in the communications library "
    "(e.g. NCCL), etc. "
)
NCCL_VALIDATION = (
    "[rank1]:[E1128 21:11:49.041194513 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 1] Received a dump signal due to a collective timeout from this local rank "
    + _DUMP_SIGNAL.format(enq=22, done=21)
    + "\n[rank0]:[E1128 21:11:49.041188078 ProcessGroupNCCL.cpp:1806] [PG ID 0 PG GUID "
    "0(default_pg) Rank 0] Observed flight recorder dump signal from another rank via TCPStore.\n"
    "[rank2]:[E1128 21:11:49.041253142 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 2] Received a dump signal due to a collective timeout from this local rank "
    + _DUMP_SIGNAL.format(enq=22, done=21)
    + "\n"
)
NCCL_VALIDATION_IDLE_RANK0 = (
    "[rank0]:[E1128 21:11:49.041301457 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 0] Received a dump signal due to a collective timeout from  rank 1 "
    + _DUMP_SIGNAL.format(enq=21, done=21)
    + "\n"
)


def watchdog(rank: int, seq: int, op: str, numel: int) -> str:
    """The watchdog line of huggingface/open-r1#620 (torch 2.6), for one rank and one work."""
    return (
        f"[rank{rank}]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog "
        f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
        f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000) ran for 1800010 milliseconds "
        "before timing out.\n"
    )


ELASTIC_SIGKILL = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-04-24_01:11:25
  host      : gpu-node-3
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 41877)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 41877
============================================================
"""


def diagnose(tmp_path: Path, files: dict[str, str]) -> list[Finding]:
    """Scan the files as `triage analyze` would and rank what the hang rules find."""
    paths = []
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        paths.append(str(path))
    run = REGISTRY.run("scan_logs", {"log_files": paths})
    evidence = EvidenceSet(run.evidence)
    return ranked([finding for _, finding in run_rules(select(["hang.*"]), evidence)])


def by_cause(found: list[Finding]) -> dict[str, Finding]:
    return {f.cause_id: f for f in found}


# --- signatures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "name", "expected"),
    [
        (
            "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, "
            "NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.",
            "hang.watchdog_timeout",
            {"rank": 0, "seq": 1, "op": "BROADCAST", "numel_in": 131072000, "ran_ms": 600081},
        ),
        (
            "Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, "
            "Timeout(ms)=1800000) ran for 1800995 milliseconds before timing out.",
            "hang.watchdog_timeout",
            {"op": "ALLREDUCE", "timeout_ms": 1800000, "ran_ms": 1800995},
        ),
        (  # a pasted log wrapped before WorkNCCL( (mila-iqia/milabench#269)
            "WorkNCCL(SeqNum=2070, OpType=REDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600034 milliseconds before timing out.",
            "hang.watchdog_timeout",
            {"seq": 2070, "op": "REDUCE", "timeout_ms": 600000},
        ),
        (
            "what():  [PG ID 0 PG GUID 0(default_pg) Rank 6] Process group watchdog thread "
            "terminated with exception: [Rank 6] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=880, OpType=BROADCAST, NumelIn=131137536, NumelOut=131137536, "
            "Timeout(ms)=1800000) ran for 1800902 milliseconds before timing out.",
            "hang.watchdog_timeout",
            {"rank": 6, "pg": "0", "seq": 880},
        ),
        (
            "[rank0]:[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 0] Timeout "
            "at NCCL work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.",
            "hang.watchdog_progress",
            {"rank": 0, "pg": "1", "seq": 7753, "last_enqueued": 7755, "last_completed": 7752},
        ),
        (
            "[rank118]:[E603 17:48:01.005538748 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID "
            "0(default_pg) Rank 118]  failure detected by watchdog at work sequence id: 2398459 PG "
            "status: last enqueued work: 2398578, last completed work: 2398458",
            "hang.watchdog_progress",
            {"rank": 118, "seq": 2398459, "last_enqueued": 2398578, "last_completed": 2398458},
        ),
        (
            NCCL_VALIDATION_IDLE_RANK0.strip(),
            "hang.watchdog_progress",
            {"rank": 0, "last_enqueued": 21, "last_completed": 21, "timeout_from": 1},
        ),
        (
            "[rank6]:[E429 13:55:49.384372190 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID "
            "0(default_pg) Rank 6] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
            "making progress in monitoring enqueued collectives.",
            "hang.watchdog_stuck",
            {"rank": 6, "stuck_s": 480},
        ),
        (
            "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:525 (most recent call first):",
            "hang.watchdog_exception",
            {"where": "checkTimeout"},
        ),
        (
            "Rank 1 failed to pass monitoredBarrier in 30000 ms",
            "hang.monitored_barrier",
            {"rank": 0, "failed_ranks": [1], "timeout_ms": 30000},
        ),
        (
            "[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms",
            "hang.monitored_barrier",
            {"rank": 0, "failed_ranks": [1, 3]},
        ),
        (
            "h015:2073494:2073958 [2] NCCL INFO AllReduce: opCount 1e7 sendbuff 0x145d0be7e400 "
            "recvbuff 0x145d0be7e400 count 18816 datatype 7 op 0 root 0 comm 0x55956223bb90 "
            "[nranks=16] stream 0x55956223a9a0",
            "hang.nccl_coll",
            {"coll": "AllReduce", "opcount": 0x1E7, "count": 18816, "nranks": 16},
        ),
        (  # RCCL names the global rank
            "banff-cyxtera-s78-4:52939:52939 [2] NCCL INFO AllReduce: opCount 2 sendbuff "
            "0x7f2a8436e600 recvbuff 0x7f2a8436e600 count 1 datatype 8 op 0 root 0 comm 0xac3ea00 "
            "[nranks=8] stream 0xa78f810 task 0 globalrank 2",
            "hang.nccl_coll",
            {"opcount": 2, "rank": 2, "datatype": 8},
        ),
    ],
)
def test_signatures_read_every_variant(line: str, name: str, expected: dict[str, object]) -> None:
    fields = dict(next((f for sig, f in signatures.matches(line) if sig.name == name), {}))
    assert fields, f"{name} did not match"
    assert {k: fields.get(k) for k in expected} == expected


def test_fingerprint_mismatch_keeps_a_full_peer_and_flags_a_partial_one() -> None:
    full = DETAIL_SEQ["rank0.log"].splitlines()[-1]
    partial = DETAIL_TWO_RANKS["rank0.log"].splitlines()[-1]
    old = (  # torch < 1.13: no sequence numbers; a tensorless peer cannot be trusted
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 3 is running "
        "collective: CollectiveFingerPrint(OpType=BARRIER), but Rank 0 is running collective: "
        "CollectiveFingerPrint(OpType=ALLGATHER_COALESCED)."
    )
    read = {
        key: next(
            f for sig, f in signatures.matches(text) if sig.name == "hang.fingerprint_mismatch"
        )
        for key, text in (("full", full), ("partial", partial), ("old", old))
    }
    assert read["full"]["op"] == "ALLREDUCE" and read["full"]["peer_op"] == "BROADCAST"
    assert read["full"]["peer_shape"] == "73" and not read["full"]["peer_partial"]
    assert read["partial"]["seq"] == 3 and read["partial"]["peer_partial"]
    assert read["old"]["op"] == "BARRIER" and read["old"]["peer_partial"]


# --- DETAIL fingerprints (gloo, recorded here) -----------------------------------------------


def test_fingerprints_blame_the_rank_in_another_collective(tmp_path: Path) -> None:
    found = diagnose(tmp_path, DETAIL_SEQ)
    top = found[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [1]
    assert top.location is not None and (top.location.file, top.location.line) == (SEQ_SCRIPT, 11)
    assert "BROADCAST #2" in top.summary and "ALLREDUCE #2" in top.summary
    assert top.confidence >= 0.8


def test_fingerprints_with_equal_ops_and_other_sizes_are_a_shape_mismatch(tmp_path: Path) -> None:
    found = diagnose(tmp_path, DETAIL_SHAPE)
    assert found[0].cause_id == "hang.shape_mismatch"
    assert found[0].ranks == [2]
    assert "[5]" in found[0].summary and "[4]" in found[0].summary
    assert "hang.mismatched_collective" not in by_cause(found)


def test_a_two_rank_tie_names_both_ranks(tmp_path: Path) -> None:
    found = diagnose(tmp_path, DETAIL_TWO_RANKS)
    top = found[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [0, 1]
    assert "cannot tell" in top.summary
    assert "SCATTER" not in top.summary  # the partial peer fingerprint is not believed
    assert top.confidence < 0.8


def test_monitored_barrier_names_the_rank_that_never_arrived(tmp_path: Path) -> None:
    found = diagnose(tmp_path, DETAIL_BUSY)
    top = found[0]
    assert top.cause_id == "hang.rank_not_in_collective"
    assert top.ranks == [1]
    assert top.confidence >= 0.8
    assert by_cause(found)["hang.collective_timeout"].confidence < top.confidence


# --- plain gloo timeouts --------------------------------------------------------------------


def test_the_rank_without_a_timeout_is_the_one_the_others_waited_for(tmp_path: Path) -> None:
    found = diagnose(tmp_path, GLOO_BUSY)
    top = found[0]
    assert top.cause_id == "hang.rank_not_in_collective"
    assert top.ranks == [1]
    assert "lost connection" in top.summary
    timeout = by_cause(found)["hang.collective_timeout"]
    assert timeout.ranks == [] and "5000 ms" in timeout.summary


# loop.py, three gloo ranks, timeout 5 s. Plain: rank 2 gets 4 batches, the others 5, so it
# reaches the final barrier while they wait in the loop's all_reduce. MODE=branch: equal
# batches, but rank 0 broadcasts at step 2 under a rank-dependent `if`. The tracebacks'
# script path is the test's copy of the script, so the rules can read its source.
LOOP_SCRIPT = """\
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    branch = os.environ.get("MODE") == "branch"
    steps = 4 if rank == 2 and not branch else 5  # rank 2 gets fewer batches
    grad = torch.ones(8)
    for step in range(steps):
        if branch and rank == 0 and step == 2:
            dist.broadcast(grad, src=0)
        dist.all_reduce(grad)
    dist.barrier()


if __name__ == "__main__":
    main()
"""
_LOOP_CALLS = {
    "all_reduce": (17, "dist.all_reduce(grad)", 4181),
    "broadcast": (16, "dist.broadcast(grad, src=0)", 4055),
    "barrier": (18, "dist.barrier()", 6614),
}


def loop_log(
    rank: int, op: str, script: str, direction: str = "recv", error: str = "", at: int = 0
) -> str:
    line, code, src = _LOOP_CALLS[op]
    line = at or line
    buffer = "unbound_buffer.cc:78" if direction == "recv" else "unbound_buffer.cc:129"
    error = error or (
        f"RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/{buffer}] "
        f"Timed out waiting 5000ms for {direction} operation to complete"
    )
    return (
        "\n".join(
            f"[rank{rank}]: {text}"
            for text in (
                "Traceback (most recent call last):",
                f'  File "{script}", line 22, in <module>',
                "    main()",
                f'  File "{script}", line {line}, in main',
                f"    {code}",
                f'  File "{SITE}/c10d_logger.py", line 83, in wrapper',
                "    return func(*args, **kwargs)",
                f'  File "{SITE}/distributed_c10d.py", line {src}, in {op}',
                "    work.wait()",
                error,
            )
        )
        + "\n"
    )


def test_a_timed_out_traceback_after_the_loop_means_fewer_steps(tmp_path: Path) -> None:
    script = _write(tmp_path, "loop.py", LOOP_SCRIPT)
    logs = {
        "rank0.log": loop_log(0, "all_reduce", script, "send"),
        "rank1.log": loop_log(1, "all_reduce", script),
        "rank2.log": loop_log(2, "barrier", script),
    }
    top = diagnose(tmp_path, logs)[0]
    assert top.cause_id == "hang.uneven_inputs"
    assert top.ranks == [2]
    assert top.location is not None and top.location.line == 18


def test_timed_out_tracebacks_at_another_call_under_a_rank_branch(tmp_path: Path) -> None:
    script = _write(tmp_path, "loop.py", LOOP_SCRIPT)
    logs = {
        "rank0.log": loop_log(0, "broadcast", script, "send"),
        "rank1.log": loop_log(1, "all_reduce", script),
        "rank2.log": loop_log(2, "all_reduce", script),
    }
    top = diagnose(tmp_path, logs)[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [0]
    assert "if branch and rank == 0" in top.summary


def test_a_rank_whose_peer_closed_first_still_stood_in_its_own_collective(tmp_path: Path) -> None:
    """The rank that timed out exits; its peer, waiting in another collective, sees only the
    closed connection. Its traceback still says which collective it stood in."""
    script = _write(tmp_path, "loop.py", LOOP_SCRIPT)
    closed = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        "Connection closed by peer [127.0.0.1]:41562"
    )
    logs = {
        "rank0.log": loop_log(0, "broadcast", script, "send", error=closed),
        "rank1.log": loop_log(1, "all_reduce", script),
    }
    top = diagnose(tmp_path, logs)[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [0]
    assert top.location is not None and top.location.line == 16


SKIP_SCRIPT = LOOP_SCRIPT.replace(
    "        if branch and rank == 0 and step == 2:\n",
    "        if not (rank == 2 and step == 3):\n",
)


@pytest.mark.parametrize("ranks", [[0, 1, 2], [0, 2]], ids=["majority", "tie"])
def test_the_rank_an_excluding_if_left_out_skipped_the_call_under_it(
    tmp_path: Path, ranks: list[int]
) -> None:
    """`if not (rank == 2 ...)` lets the others into the broadcast; rank 2 skipped it and
    waits in the next call. Rank 2 is the culprit, the skipped call the line, also when
    one rank stands on each side."""
    script = _write(tmp_path, "loop.py", SKIP_SCRIPT)
    logs = {
        f"rank{r}.log": loop_log(r, "all_reduce" if r == 2 else "broadcast", script) for r in ranks
    }
    top = diagnose(tmp_path, logs)[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [2]
    assert top.location is not None and top.location.line == 16
    assert "leaves some ranks out" in top.summary


IF_ELSE_SCRIPT = LOOP_SCRIPT.replace(
    "        if branch and rank == 0 and step == 2:\n"
    "            dist.broadcast(grad, src=0)\n"
    "        dist.all_reduce(grad)\n",
    "        if rank == 0 and step == 2:\n"
    "            dist.broadcast(grad, src=0)\n"
    "        else:\n"
    "            dist.all_reduce(grad)\n",
)


def test_of_an_if_and_its_else_the_rank_the_test_picks_out_is_odd(tmp_path: Path) -> None:
    """`if rank == 0 ...: broadcast else: all_reduce` on two ranks: both calls sit under the
    `if`, but rank 0 is the one the test picked out; its call is the line."""
    script = _write(tmp_path, "loop.py", IF_ELSE_SCRIPT)
    logs = {
        "rank0.log": loop_log(0, "broadcast", script),
        "rank1.log": loop_log(1, "all_reduce", script, at=18),
    }
    top = diagnose(tmp_path, logs)[0]
    assert top.cause_id == "hang.mismatched_collective"
    assert top.ranks == [0]
    assert top.location is not None and top.location.line == 16


RESHAPE_SCRIPT = LOOP_SCRIPT.replace(
    "        if branch and rank == 0 and step == 2:\n            dist.broadcast(grad, src=0)\n",
    "        if rank == 0 and step == 2:\n            grad = torch.ones(9)\n",
)


def test_one_collective_whose_input_a_rank_branch_resizes_is_a_shape_mismatch(
    tmp_path: Path,
) -> None:
    """Every rank times out in the same all_reduce; above it, rank 0 swaps in a tensor of
    another size. The logs alone show one collective; the source shows why."""
    script = _write(tmp_path, "loop.py", RESHAPE_SCRIPT)
    logs = {f"rank{r}.log": loop_log(r, "all_reduce", script) for r in range(3)}
    top = diagnose(tmp_path, logs)[0]
    assert top.cause_id == "hang.shape_mismatch"
    assert top.location is not None and top.location.line == 17
    assert "`if rank == 0 and step == 2:`" in top.summary


def test_a_quiet_rank_whose_peers_lost_the_connection_exited(tmp_path: Path) -> None:
    """Rank 1 called os._exit (or got SIGKILL) and logged nothing; rank 0 saw its gloo
    connection close before any timeout. A hung rank keeps its sockets open: rank 1's
    process is gone."""
    script = _write(tmp_path, "loop.py", LOOP_SCRIPT)
    closed = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        "Connection closed by peer [127.0.0.1]:41562"
    )
    logs = {
        "rank0.log": "step 3 loss 0.25\n" + loop_log(0, "all_reduce", script, error=closed),
        "rank1.log": "step 3 loss 0.31\n",
    }
    top = diagnose(tmp_path, logs)[0]
    assert top.cause_id == "hang.rank_exited"
    assert top.ranks == [1]
    assert "lost the connection to it" in top.summary


HELPER_SCRIPT = """\
import torch.distributed as dist


def sync(grad, on):
    if on:
        dist.all_reduce(grad)


def main(rank, grad):
    for step in range(5):
        sync(grad, not (rank == 1 and step == 2))
    dist.barrier()
"""


def _helper_log(rank: int, script: str, frames: list[tuple[int, str, str]], op: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for line, function, code in frames:
        lines += [f'  File "{script}", line {line}, in {function}', f"    {code}"]
    lines += [
        f'  File "{SITE}/c10d_logger.py", line 83, in wrapper',
        "    return func(*args, **kwargs)",
        f'  File "{SITE}/distributed_c10d.py", line 4181, in {op}',
        "    work.wait()",
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
        "unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete",
    ]
    return "\n".join(f"[rank{rank}]: {text}" for text in lines) + "\n"


def test_a_rank_past_the_loop_while_others_wait_under_a_helpers_if_may_have_skipped(
    tmp_path: Path,
) -> None:
    """The others time out in an all_reduce that a helper runs only under `if on:`; the
    rank at the final barrier may have had it false once (a skip) or run fewer steps: the
    skip first, uneven inputs close behind, neither at 0.8."""
    script = _write(tmp_path, "train.py", HELPER_SCRIPT)
    waiting = [(11, "main", "sync(grad, ...)"), (6, "sync", "dist.all_reduce(grad)")]
    logs = {
        "rank0.log": _helper_log(0, script, waiting, "all_reduce"),
        "rank1.log": _helper_log(1, script, [(12, "main", "dist.barrier()")], "barrier"),
        "rank2.log": _helper_log(2, script, waiting, "all_reduce"),
    }
    found = diagnose(tmp_path, logs)
    top = found[0]
    assert top.cause_id == "hang.mismatched_collective", found
    assert top.ranks == [1] and top.location is not None and top.location.line == 6
    assert "`if on:`" in top.summary
    uneven = by_cause(found)["hang.uneven_inputs"]
    assert uneven.confidence < top.confidence < 0.8


def test_a_sigkill_after_the_first_failure_may_be_the_launchers_teardown(tmp_path: Path) -> None:
    """torchrun's report: rank 0 failed first (its watchdog's SIGABRT), rank 3 got SIGKILL
    afterwards; ranks 0-2 timed out in one collective, rank 3's log is quiet. A rank that
    ignores SIGTERM (stopped, stuck in C) is SIGKILLed by the teardown: not a confident
    'rank 3 died first'."""
    folder = Path(__file__).parent / "rules/logs.rank_not_in_collective/nccl_watchdog_silent_rank"
    files = {p.name: p.read_text() for p in folder.glob("*.log")}
    files["torchrun.log"] = (
        files["torchrun.log"]
        .replace("exitcode  : -15 (pid: 1237)", "exitcode  : -9 (pid: 1237)")
        .replace(
            "Signal 15 (SIGTERM) received by PID 1237", "Signal 9 (SIGKILL) received by PID 1237"
        )
    )
    found = diagnose(tmp_path, files)
    assert found[0].cause_id == "hang.rank_not_in_collective" and found[0].ranks == [3]
    exited = by_cause(found).get("hang.rank_exited")
    assert exited is None or (exited.confidence < 0.5 and "teardown" in exited.summary)


# --- NCCL watchdog (public reports) ---------------------------------------------------------


def test_every_rank_in_the_same_work_is_a_timeout_without_culprit(tmp_path: Path) -> None:
    found = diagnose(tmp_path, {"console.log": NCCL_SAME_WORK})
    assert [f.cause_id for f in found] == ["hang.collective_timeout"]
    assert found[0].ranks == []
    assert "ALLREDUCE #808" in found[0].summary
    assert "same collective" in found[0].summary
    assert "py-spy" in found[0].fix and "TORCH_FR_BUFFER_SIZE" in found[0].fix


def test_work_numbers_of_different_process_groups_are_not_compared(tmp_path: Path) -> None:
    found = by_cause(diagnose(tmp_path, {"console.log": NCCL_MANY_GROUPS}))
    assert set(found) == {"hang.collective_timeout"}


def test_a_rank_with_no_work_in_flight_is_not_in_the_collective(tmp_path: Path) -> None:
    found = diagnose(tmp_path, {"console.log": NCCL_VALIDATION + NCCL_VALIDATION_IDLE_RANK0})
    top = found[0]
    assert top.cause_id == "hang.rank_not_in_collective"
    assert top.ranks == [0]
    assert "#21" in top.summary and "#22" in top.summary


def test_a_rank_that_only_observed_the_dump_signal_is_a_suspect(tmp_path: Path) -> None:
    found = by_cause(diagnose(tmp_path, {"console.log": NCCL_VALIDATION}))
    assert found["hang.rank_not_in_collective"].ranks == [0]
    assert found["hang.rank_not_in_collective"].confidence < 0.5  # a race: it may time out next


def test_watchdog_ops_that_differ_at_one_work_name_the_minority(tmp_path: Path) -> None:
    text = "".join(
        watchdog(r, 4, "ALLREDUCE" if r != 2 else "BROADCAST", 1 if r != 2 else 112)
        for r in range(4)
    )
    found = diagnose(tmp_path, {"console.log": text})
    assert found[0].cause_id == "hang.mismatched_collective"
    assert found[0].ranks == [2]


def test_watchdog_sizes_that_differ_at_one_work_are_a_shape_mismatch(tmp_path: Path) -> None:
    text = "".join(watchdog(r, 4, "BROADCAST", 112 if r != 3 else 96) for r in range(4))
    found = diagnose(tmp_path, {"console.log": text})
    assert found[0].cause_id == "hang.shape_mismatch"
    assert found[0].ranks == [3]


def test_a_rank_whole_steps_behind_in_another_op_ran_fewer_steps(tmp_path: Path) -> None:
    text = "".join(
        watchdog(r, 1580, "ALLREDUCE", 466119168) if r != 3 else watchdog(r, 1577, "BARRIER", 1)
        for r in range(4)
    )
    found = diagnose(tmp_path, {"console.log": text})
    assert found[0].cause_id == "hang.uneven_inputs"
    assert found[0].ranks == [3]
    assert "3 collectives" in found[0].title


def test_a_killed_rank_is_the_culprit_of_the_others_timeouts(tmp_path: Path) -> None:
    text = "".join(watchdog(r, 460631, "ALLREDUCE", 1) for r in range(3)) + ELASTIC_SIGKILL
    found = diagnose(tmp_path, {"console.log": text})
    top = found[0]
    assert top.cause_id == "hang.rank_exited"
    assert top.ranks == [3]
    assert "SIGKILL" in top.summary
    assert by_cause(found)["hang.collective_timeout"].confidence < top.confidence


def test_aborted_victims_are_not_blamed(tmp_path: Path) -> None:
    """The watchdog takes every timed-out rank down with SIGABRT; the report lists them."""
    report = ELASTIC_SIGKILL.replace(
        "rank      : 3 (local_rank: 3)", "rank      : 1 (local_rank: 1)"
    )
    report = report.replace("-9 (pid: 41877)", "-6 (pid: 41877)").replace(
        "Signal 9 (SIGKILL)", "Signal 6 (SIGABRT)"
    )
    text = "".join(watchdog(r, 460631, "ALLREDUCE", 1) for r in range(3)) + report
    found = by_cause(diagnose(tmp_path, {"console.log": text}))
    assert "hang.rank_exited" not in found


def test_a_rank_whose_own_error_ended_it_exited_while_the_others_waited(tmp_path: Path) -> None:
    oom = (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/workspace/train.py", line 88, in <module>\n'
        "[rank3]:     loss.backward()\n"
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 "
        "has a total capacity of 79.15 GiB of which 842.32 MiB is free. Including non-PyTorch "
        "memory, this process has 77.91 GiB memory in use.\n"
    )
    text = "".join(watchdog(r, 460631, "ALLREDUCE", 1) for r in range(3)) + oom
    exited = by_cause(diagnose(tmp_path, {"console.log": text}))["hang.rank_exited"]
    assert exited.ranks == [3]
    assert "OutOfMemoryError" in exited.summary
    assert exited.location is not None and exited.location.line == 88


def coll(rank: int, opcount: int, name: str, count: int) -> str:
    """An NCCL_DEBUG_SUBSYS=COLL line (NCCL 2.18) as torchrun --tee prefixes it."""
    return (
        f"[rank{rank}]:h015:{2073494 + rank}:{2073958 + rank} [{rank}] NCCL INFO {name}: opCount "
        f"{opcount:x} sendbuff 0x145d0be7e400 recvbuff 0x145d0be7e400 count {count} datatype 7 "
        "op 0 root 0 comm 0x55956223bb90 [nranks=4] stream 0x55956223a9a0\n"
    )


def test_opcounts_name_the_rank_that_enqueued_one_collective_less(tmp_path: Path) -> None:
    text = "".join(
        coll(r, n, "AllReduce", 18816)
        for n in (0x1E6, 0x1E7)
        for r in range(4)
        if (r, n) != (1, 0x1E7)
    )
    found = diagnose(tmp_path, {"console.log": text})
    assert found[0].cause_id == "hang.mismatched_collective"
    assert found[0].ranks == [1]
    assert "AllReduce #486" in found[0].summary and "AllReduce #487" in found[0].summary


def test_opcounts_steps_apart_in_another_op_are_uneven_inputs(tmp_path: Path) -> None:
    text = "".join(coll(r, 0x1E7, "AllReduce", 18816) for r in range(3)) + coll(
        3, 0x1E4, "AllGather", 1
    )
    found = diagnose(tmp_path, {"console.log": text})
    assert found[0].cause_id == "hang.uneven_inputs"
    assert found[0].ranks == [3]


# --- pasted stack dumps ---------------------------------------------------------------------


def test_pasted_py_spy_dumps_of_two_ranks_reach_the_stack_rules(tmp_path: Path) -> None:
    run = REGISTRY.run(
        "scan_logs", {"log_files": [_write(tmp_path, n, t) for n, t in PY_SPY_MISMATCH.items()]}
    )
    stacks = [e for e in run.evidence if e.kind == "stack"]
    assert sorted(e.rank for e in stacks if e.rank is not None) == [0, 1]
    assert {e.data["op"] for e in stacks} == {"broadcast", "all_reduce"}
    found = by_cause(
        ranked([f for _, f in run_rules(select(["hang.*"]), EvidenceSet(run.evidence))])
    )
    mismatch = found["hang.mismatched_collective"]
    assert mismatch.rule_id == "stacks.mismatched_collective"
    # one rank on each side and no source to read: say so instead of picking a side
    assert mismatch.ranks == [0, 1] and mismatch.confidence < 0.8
    assert "no majority" in mismatch.title
    assert mismatch.location is not None and mismatch.location.line == 53


def test_a_pasted_dump_keeps_each_process_and_skips_background_threads(tmp_path: Path) -> None:
    run = REGISTRY.run("scan_logs", {"log_files": [_write(tmp_path, "paste.txt", PY_SPY_BUSY)]})
    stacks = [e for e in run.evidence if e.kind == "stack"]
    assert len(stacks) == 2  # the two heartbeat threads are not ranks
    assert 30129 in {e.data["pid"] for e in stacks}
    found = by_cause(
        ranked([f for _, f in run_rules(select(["hang.*"]), EvidenceSet(run.evidence))])
    )
    assert found["hang.rank_not_in_collective"].rule_id == "stacks.rank_not_in_collective"
    assert "bg.py:21" in found["hang.rank_not_in_collective"].summary


def test_a_lone_dump_in_checkpoint_code_is_a_weak_hint(tmp_path: Path) -> None:
    found = diagnose(tmp_path, {"rank0.log": CHECKPOINT_DUMP})
    top = found[0]
    assert top.cause_id == "hang.rank_not_in_collective"
    assert top.ranks == [0]
    assert top.location is not None and top.location.function == "save_checkpoint"
    assert 0.4 <= top.confidence <= 0.5


def _write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


# --- a real hung job, dumped with py-spy as a user would paste it ----------------------------


@pytest.mark.scenario
@requires_torch
def test_real_py_spy_text_dumps_pasted_into_analyze(tmp_path: Path) -> None:
    from triage.scenarios import RankJob

    binary = pyspy.binary()
    if binary is None:
        pytest.skip("py-spy is not installed")
    with RankJob("mismatched_collective", world_size=2) as job:
        job.wait_until_stalled()
        dumps = [
            subprocess.run(
                [binary, "dump", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            for pid in job.pids
        ]
        fault = job.marker_line("fault")
    done = subprocess.run(
        triage_cli("analyze", "-", "--json"),
        input="\n".join(dumps),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    top = report["hypotheses"][0]
    assert top["cause_id"] == "hang.mismatched_collective", json.dumps(report["hypotheses"])
    assert top["location"]["line"] == fault
    assert len([e for e in report["evidence"] if e["kind"] == "stack"]) == 2


SLEEPING_RANK = Path(__file__).parent / "fixtures" / "launcher_sleeping_rank.log"


def test_a_rank_the_teardown_stopped_without_a_line_of_its_own_is_the_culprit(
    tmp_path: Path,
) -> None:
    """torchrun's combined output of a real 4-rank gloo job (the fault matrix's sleep fault,
    rank 3 asleep; its checkout path replaced): ranks 0-2 time out in one all_reduce, rank 3
    appears only in the launcher's report, stopped by SIGTERM."""
    report = analyze_files(tmp_path, {"launcher.log": SLEEPING_RANK.read_text()})
    top = report.hypotheses[0]
    assert (top.cause_id, top.confidence, top.ranks) == ("hang.rank_not_in_collective", 0.55, [3])
    assert "only in the launcher's report" in top.summary
    assert report.hypotheses[1].cause_id == "hang.collective_timeout"  # the close call


def test_many_silent_ranks_beside_one_timeout_read_weaker(tmp_path: Path) -> None:
    """Two silent ranks and one that timed out: the teardown may have stopped ranks that
    were in the collective before their own timeout fired."""
    text = SLEEPING_RANK.read_text()
    cut = "\n".join(
        line for line in text.splitlines() if not line.startswith(("[rank0]", "[rank2]"))
    )
    found = [
        h
        for h in analyze_files(tmp_path, {"launcher.log": cut}).hypotheses
        if h.cause_id == "hang.rank_not_in_collective"
    ]
    assert found and found[0].confidence == 0.4 and found[0].ranks == [0, 2, 3]


def _no_destroy(rank: int) -> str:
    """torch's warning as a rank's process group is torn down at Python's exit."""
    return (
        f"[rank{rank}]:[W205 18:00:34.953145631 ProcessGroupNCCL.cpp:1538] Warning: WARNING:"
        " destroy_process_group() was not called before program exit, which can leak"
        " resources. For more info, please see"
        " https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())\n"
    )


def test_ranks_that_reached_exit_left_the_timed_out_rank_behind(tmp_path: Path) -> None:
    timeout = (
        "[rank1]:[E205 18:10:35.383292273 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught"
        " collective operation timeout: WorkNCCL(SeqNum=4486, OpType=ALLREDUCE, NumelIn=1,"
        " NumelOut=1, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.\n"
    )
    found = diagnose(tmp_path, {"console.log": _no_destroy(0) + _no_destroy(2) + timeout})
    assert (found[0].cause_id, found[0].ranks) == ("hang.rank_exited", [0, 2])
    assert "rank 1 waited for them" in found[0].summary
    assert "destroy_process_group()" in found[0].fix


def test_every_rank_reaching_exit_is_no_hang(tmp_path: Path) -> None:
    found = diagnose(tmp_path, {"console.log": "".join(_no_destroy(r) for r in range(4))})
    assert all(f.cause_id != "hang.rank_exited" for f in found)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: RPCErr:1:RPC ran for more than 60000 milliseconds and timed out.",
        "RuntimeError: RPC ran for more than set timeout (60000 ms) and will now be marked with"
        " an error",
    ],
)
def test_an_rpc_past_its_timeout(tmp_path: Path, line: str) -> None:
    """torch.distributed.rpc's words, old and new, for a remote call past its timeout."""
    found = diagnose(tmp_path, {"rank0.log": line + "\n"})
    assert (found[0].cause_id, found[0].confidence) == ("hang.collective_timeout", 0.45)
    assert "60000 ms" in found[0].summary and "rpc_timeout" in found[0].fix


_HOROVOD_SHUT = (
    "{p}RuntimeError: Horovod has been shut down. This was caused by an exception on one of"
    " the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the"
    " ranks finished execution. If the shutdown was caused by an exception, you should see"
    " the exception in the log before the first shutdown message.\n"
)


def test_horovod_shut_down_with_no_rank_error_is_a_rank_that_finished(tmp_path: Path) -> None:
    """horovodrun interleaves every rank's output: a shut-down with no exception anywhere
    reads as a rank that finished first, above a peer whose log is missing."""
    log = "".join(f"[1,{r}]<stdout>:epoch 3 step 120\n" for r in range(4)) + "".join(
        _HOROVOD_SHUT.format(p=f"[1,{r}]<stderr>:") for r in (0, 1, 2)
    )
    found = analyze_files(tmp_path, {"console.log": log}).hypotheses
    assert found[0].cause_id == "hang.rank_exited" and found[0].confidence == 0.5
    assert "finished" in found[0].title
    assert "comm.peer_failure" in [f.cause_id for f in found[1:]]


def test_horovod_shut_down_after_a_rank_error_is_that_error(tmp_path: Path) -> None:
    oom = (
        "[1,2]<stderr>:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
        " GPU 0 has a total capacity of 15.77 GiB of which 1.05 GiB is free.\n"
    )
    found = diagnose(tmp_path, {"console.log": oom + _HOROVOD_SHUT.format(p="[1,0]<stderr>:")})
    assert not any(f.cause_id == "hang.rank_exited" and f.confidence >= 0.5 for f in found)


def test_a_detail_mismatch_wrapped_before_its_fingerprints_is_a_weaker_mismatch(
    tmp_path: Path,
) -> None:
    """A paste that broke torch's one-line DETAIL report after `collective:`."""
    wrapped = (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running"
        " collective:\n"
        "CollectiveFingerPrint(SequenceNumber=15, OpType=ALLREDUCE, ...), but Rank 1 is"
        " running collective:\n"
        "CollectiveFingerPrint(SequenceNumber=0, OpType=REDUCE)\n"
    )
    found = diagnose(tmp_path, {"console.log": wrapped})
    assert (found[0].cause_id, found[0].confidence) == ("hang.mismatched_collective", 0.5)
    assert "cut from the paste" in found[0].summary


def test_an_index_kernels_assertion_is_named(tmp_path: Path) -> None:
    """ATen's index_select check, as public reports paste it (a token id past the vocabulary)."""
    text = (
        "../aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: [114,0,0],"
        " thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
    )
    top = analyze_files(tmp_path, {"rank3.log": text}).hypotheses[0]
    assert top.cause_id == "hang.rank_exited" and top.confidence == 0.45
    assert "`srcIndex < srcSelectDimSize` failed in indexSelectLargeIndex" in top.title
    (tmp_path / "lambda").mkdir()
    lambda_kernel = analyze_files(tmp_path / "lambda", {"rank0.log": CRASH_IN_LAMBDA})
    assert "failed in a kernel of IndexKernel.cu" in lambda_kernel.hypotheses[0].title


CRASH_IN_LAMBDA = (
    "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread:"
    ' [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.\n'
)
