"""Logs shaped like real ones, with failures planted at known lines, for bench/log_scan.py.

- sparse: a training loop's rank log (metrics, warnings, a little NCCL chatter) with a CUDA
  OOM, a watchdog timeout and a lost peer planted at 30/60/90% and a traceback at the end;
- dense: an NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL rank log, every line a per-op INFO line
  on two communicators, two `NCCL WARN` shared-memory lines buried in the middle and a
  DistBackendError at the end (the cause: comm.shm_exhausted);
- job: a folder of such rank logs, one per rank of a 64-rank job: one rank ran out of
  /dev/shm (its WARN lines in the middle, its error at the end, three collectives short of
  its peers), and every other rank's watchdog times out at the end of its log;
- steps: a training loop that prints its GPU memory every step, as torchtitan does (every
  line a matching line), ending in a CUDA out-of-memory traceback.

Text is what torch and NCCL print (NCCL 2.21, torch 2.5), behind torchrun's `[rankN]:`.
"""

from __future__ import annotations

import multiprocessing as mp
import random
from dataclasses import dataclass
from pathlib import Path

RANK = 3
HOST, PID = "gpu-node-07", 48213
BLOCK_LINES = 20_000
#: A COLL log's steps: (communicator, op, element count) per collective; each step of FSDP
#: gathers and reduce-scatters six layers on the world and all-reduces twice within a node.
STEP = (
    [("world", "AllGather", 1_048_576)] * 6
    + [("world", "ReduceScatter", 131_072)] * 6
    + [("node", "AllReduce", 4_096)] * 2
)
SHM_SEGMENT = "/dev/shm/nccl-v3J8cp"


@dataclass
class Planted:
    """A failure written into a log, and the file and line range it occupies."""

    name: str
    lines: list[str]
    first: int = 0
    path: str = ""

    @property
    def last(self) -> int:
        return self.first + len(self.lines) - 1


def prefixed(text: str) -> str:
    return f"[rank{RANK}]:{text}\n"


def nccl(text: str, tid: int = PID) -> str:
    return prefixed(f"{HOST}:{PID}:{tid} [{RANK}] NCCL {text}")


def init_lines() -> list[str]:
    """What NCCL_DEBUG=INFO prints while the process group comes up."""
    return [
        nccl("INFO cudaDriverVersion 12040"),
        nccl("INFO Bootstrap : Using eth0:10.42.7.17<0>"),
        nccl("INFO NET/Plugin: No plugin found (libnccl-net.so)"),
        nccl("INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.42.7.17<0>"),
        nccl("INFO Using non-device net plugin version 0"),
        nccl("INFO Using network IB"),
        nccl(
            "INFO comm 0x55d0b3a4c2e0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 4a000 "
            "commId 0x9d1c0e2b7f3a6c11 - Init START",
            PID + 211,
        ),
        nccl("INFO Setting affinity for GPU 3 to ffff,ffff0000,0000ffff", PID + 211),
        nccl("INFO Channel 00/02 :    0   1   2   3   4   5   6   7", PID + 211),
        nccl("INFO Channel 01/02 :    0   1   2   3   4   5   6   7", PID + 211),
        nccl("INFO Trees [0] 4/-1/-1->3->2 [1] 4/-1/-1->3->2", PID + 211),
        nccl("INFO P2P Chunksize set to 524288", PID + 211),
        nccl("INFO Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM/read", PID + 211),
        nccl("INFO Channel 01/0 : 3[3] -> 4[4] via P2P/CUMEM/read", PID + 211),
        nccl("INFO Connected all rings", PID + 211),
        nccl("INFO Connected all trees", PID + 211),
        nccl("INFO threadThresholds 8/8/64 | 64/8/64 | 512 | 512", PID + 211),
        nccl(
            "INFO 2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, "
            "2 p2p channels per peer",
            PID + 211,
        ),
        nccl(
            "INFO comm 0x55d0b3a4c2e0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 4a000 "
            "commId 0x9d1c0e2b7f3a6c11 - Init COMPLETE",
            PID + 211,
        ),
    ]


def training_block(rng: random.Random, first_step: int) -> list[str]:
    """BLOCK_LINES lines of a training loop: metrics, periodic warnings and NCCL chatter."""
    out: list[str] = []
    step = first_step
    seconds = 0
    while len(out) < BLOCK_LINES:
        step += 1
        seconds += rng.randint(1, 2)
        stamp = f"2026-03-02 {14 + seconds // 3600 % 10:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d},{rng.randint(0, 999):03d}"
        loss = 2.1 + rng.random() * 0.4
        out.append(
            prefixed(
                f"[{stamp}][train][INFO] - step {step} | loss {loss:.4f} | lr {3e-4 * (1 - step / 2e6):.3e} "
                f"| grad_norm {0.6 + rng.random():.3f} | {rng.randint(140_000, 150_000):,} tok/s "
                f"| {380 + rng.random() * 40:.1f} TFLOPS | mem {61 + rng.random() * 3:.1f} GB"
            )
        )
        if step % 250 == 0:
            out.append(
                prefixed(
                    "/usr/local/lib/python3.11/site-packages/torch/utils/checkpoint.py:87: "
                    "UserWarning: None of the inputs have requires_grad=True. Gradients will be None"
                )
            )
            out.append(prefixed("  warnings.warn("))
        if step % 1000 == 0:
            out.append(
                prefixed(
                    f"[{stamp}][eval][INFO] - step {step} | val_loss {loss + 0.05:.4f} | ppl {7.9 + rng.random():.2f}"
                )
            )
            out.append(nccl("INFO Using network IB", PID + 400 + step % 7))
            out.append(
                nccl(
                    f"INFO comm 0x55d0b3b{step % 4096:03x}0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 "
                    "busId 4a000 commId 0x41aa77c0e2b7f3a6 - Init COMPLETE",
                    PID + 400 + step % 7,
                )
            )
    return out[:BLOCK_LINES]


def planted_failures() -> list[Planted]:
    """Real failure text as torch, NCCL and gloo print it, each behind the rank prefix."""
    watchdog = Planted(
        "watchdog timeout",
        [
            prefixed(
                "[E302 16:40:11.715298746 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=48113, OpType=ALLREDUCE, "
                "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600061 "
                "milliseconds before timing out."
            ),
            prefixed(
                "[E302 16:40:11.715588844 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) "
                "Rank 3] Exception (either an error or timeout) detected by watchdog at work: 48113, "
                "last enqueued NCCL work: 48115, last completed NCCL work: 48112."
            ),
        ],
    )
    oom = Planted(
        "CUDA OOM",
        [
            prefixed("Traceback (most recent call last):"),
            prefixed('  File "/workspace/train.py", line 214, in <module>'),
            prefixed("    main()"),
            prefixed('  File "/workspace/train.py", line 188, in main'),
            prefixed("    loss.backward()"),
            prefixed(
                '  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward'
            ),
            prefixed("    torch.autograd.backward("),
            prefixed(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
                "total capacity of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, "
                "this process has 78.08 GiB memory in use. Of the allocated memory 75.12 GiB is "
                "allocated by PyTorch, and 1.43 GiB is reserved by PyTorch but unallocated. If "
                "reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
                "documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            ),
        ],
    )
    peer = Planted(
        "Connection closed by peer",
        [
            prefixed(
                "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection "
                "closed by peer [10.42.7.21]:14004"
            )
        ],
    )
    final = Planted(
        "traceback at the end",
        [
            prefixed("Traceback (most recent call last):"),
            prefixed('  File "/workspace/train.py", line 214, in <module>'),
            prefixed("    main()"),
            prefixed('  File "/workspace/train.py", line 190, in main'),
            prefixed("    optimizer.step()"),
            prefixed('  File "/workspace/train.py", line 97, in all_reduce_grads'),
            prefixed("    dist.all_reduce(flat, group=dp_group)"),
            prefixed(
                '  File "/usr/local/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
                "line 2806, in all_reduce"
            ),
            prefixed("    work.wait()"),
            prefixed(
                "torch.distributed.DistBackendError: [Rank 3] NCCL watchdog thread terminated "
                "with exception: [Rank 3] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=48113, OpType=ALLREDUCE, NumelIn=466119168, "
                "NumelOut=466119168, Timeout(ms)=600000) ran for 600061 milliseconds before timing out."
            ),
        ],
    )
    return [oom, watchdog, peer, final]


def write_sparse(path: Path, size: int) -> list[Planted]:
    """Repeat one generated block until `size` bytes; plant failures at 30/60/90% and the end."""
    rng = random.Random(7)
    block = "".join(training_block(rng, 1000)).encode()
    planted = planted_failures()
    at: dict[int, list[Planted]] = {}
    for fraction, item in zip((0.3, 0.6, 0.9), planted[:-1], strict=True):
        at.setdefault(int(size * fraction) // len(block), []).append(item)
    line = 1
    written = 0
    with path.open("wb") as out:
        head = "".join(init_lines()).encode()
        out.write(head)
        line += len(init_lines())
        written += len(head)
        index = 0
        while written < size:
            out.write(block)
            written += len(block)
            line += BLOCK_LINES
            for item in at.get(index, []):
                item.first = line
                data = "".join(item.lines).encode()
                out.write(data)
                written += len(data)
                line += len(item.lines)
            index += 1
        final = planted[-1]
        final.first = line
        out.write("".join(final.lines).encode())
    for item in planted:
        item.path = str(path)
    return [p for p in planted if p.first]


def step_line(step: int, rng: random.Random) -> str:
    """torchtitan's per-step metrics line (its colour codes left out), behind `[rank0]:`."""
    seconds = step * 2
    stamp = f"2026-03-02 {seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    memory = 61.2 + rng.random() * 0.4
    return (
        f"[rank0]:[titan] {stamp},{rng.randint(0, 999):03d} - root - INFO - step: {step:5d}  "
        f"loss: {2.1 + rng.random() * 0.4:7.4f}  memory: {memory:5.2f}GiB({memory / 0.7915:.2f}%)"
        f"  tps: {rng.randint(7_000, 8_000):,}  tflops: {380 + rng.random() * 40:.2f}"
        f"  mfu: {38 + rng.random() * 4:.2f}%\n"
    )


def write_steps(path: Path, size: int) -> list[Planted]:
    """A per-step log of about `size` bytes (one block of lines repeated, step numbers
    running on), then the CUDA out-of-memory traceback that ended it."""
    rng = random.Random(11)
    step = 0
    written = 0
    with path.open("w") as out:
        while written < size:
            block = "".join(step_line(step + i, rng) for i in range(10_000))
            out.write(block)
            written += len(block)
            step += 10_000
        final = Planted(
            "CUDA OOM at the end",
            [
                "[rank0]:Traceback (most recent call last):\n",
                '[rank0]:  File "/workspace/torchtitan/train.py", line 431, in train_step\n',
                "[rank0]:    loss.backward()\n",
                "[rank0]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
                " GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free. Including"
                " non-PyTorch memory, this process has 78.12 GiB memory in use. Of the allocated"
                " memory 74.20 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch"
                " but unallocated.\n",
            ],
            first=step + 1,
            path=str(path),
        )
        out.write("".join(final.lines))
    return [final]


@dataclass(frozen=True)
class Writer:
    """One rank's process as its NCCL lines name it."""

    rank: int
    world: int = 8

    @property
    def host(self) -> str:
        return f"gpu-node-{self.rank // 8:02d}"

    @property
    def pid(self) -> int:
        return PID + 17 * self.rank

    @property
    def device(self) -> int:
        return self.rank % 8

    def comm(self, name: str) -> int:
        """Each process has its own communicator addresses."""
        return 0x55D0B3A4C2E0 + (self.rank << 24) + (0x1000 if name == "node" else 0)

    def line(self, text: str, thread: int = 0) -> str:
        return f"[rank{self.rank}]:{self.host}:{self.pid}:{self.pid + 211 + thread} [{self.device}] NCCL {text}\n"


def coll_lines(writer: Writer, steps: range, opcounts: dict[str, int]) -> str:
    """The COLL lines of `steps` training steps; `opcounts` counts per communicator."""
    nranks = {"world": writer.world, "node": min(8, writer.world)}
    templates = [
        (
            name,
            writer.line(
                f"INFO {op}: opCount %x sendbuff 0x%012x recvbuff 0x%012x count {count} "
                f"datatype 7 op 0 root 0 comm 0x{writer.comm(name):012x} "
                f"[nranks={nranks[name]}] stream 0x{writer.comm(name) + 0x20000:012x}",
                index % 2,
            ),
        )
        for index, (name, op, count) in enumerate(STEP)
    ]
    out = []
    world, node = opcounts["world"], opcounts["node"]
    for step in steps:
        buffer = 0x7F3A2C000000 + (step % 256 << 26)
        for index, (name, template) in enumerate(templates):
            if name == "world":
                opcount, world = world, world + 1
            else:
                opcount, node = node, node + 1
            address = buffer + (index << 21)
            out.append(template % (opcount, address, address + 0x100000))
    opcounts["world"], opcounts["node"] = world, node
    return "".join(out)


def dense_init(writer: Writer) -> list[str]:
    """NCCL_DEBUG=INFO's setup lines: they tie the process to its rank."""
    lines = [
        writer.line("INFO cudaDriverVersion 12040"),
        writer.line("INFO NCCL version 2.21.5+cuda12.4"),
    ]
    for name, nranks in (("world", writer.world), ("node", min(8, writer.world))):
        lines.append(
            writer.line(
                f"INFO comm 0x{writer.comm(name):012x} rank {writer.rank if name == 'world' else writer.device} "
                f"nranks {nranks} cudaDev {writer.device} nvmlDev {writer.device} busId 4a000 "
                f"commId 0x9d1c0e2b7f3a6c{writer.rank % 8:02x} - Init COMPLETE"
            )
        )
    return lines


def shm_warnings(writer: Writer) -> Planted:
    return Planted(
        "NCCL WARN /dev/shm full",
        [
            writer.line(f"WARN Error: failed to extend {SHM_SEGMENT} to 9637892 bytes"),
            writer.line(
                f"WARN Error while creating shared memory segment {SHM_SEGMENT} (size 9637888)"
            ),
        ],
    )


def backend_error(writer: Writer) -> Planted:
    """The DistBackendError the failed all_reduce raises, as the rank's last lines."""
    site = "/usr/local/lib/python3.11/site-packages/torch/distributed"
    rank = f"[rank{writer.rank}]:"
    return Planted(
        "DistBackendError at the end",
        [
            f"{rank}{text}\n"
            for text in (
                "Traceback (most recent call last):",
                '  File "/workspace/train.py", line 214, in <module>',
                "    main()",
                '  File "/workspace/train.py", line 190, in main',
                "    loss = train_step(model, batch)",
                '  File "/workspace/train.py", line 141, in train_step',
                "    dist.all_reduce(grad, group=node_group)",
                f'  File "{site}/c10d_logger.py", line 81, in wrapper',
                "    return func(*args, **kwargs)",
                f'  File "{site}/distributed_c10d.py", line 2806, in all_reduce',
                "    work = group.allreduce([tensor], opts)",
                "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for "
                "details), NCCL version 2.21.5",
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
                "or device error.",
            )
        ],
    )


def watchdog_timeout(writer: Writer, seq: int) -> Planted:
    rank = writer.rank
    return Planted(
        "watchdog timeout at the end",
        [
            f"[rank{rank}]:[E302 16:40:11.715298746 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog "
            f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=_ALLGATHER_BASE, "
            "NumelIn=1048576, NumelOut=67108864, Timeout(ms)=600000) ran for 600061 milliseconds "
            "before timing out.\n"
        ],
    )


def write_coll_log(
    path: Path, size: int, writer: Writer, middle: Planted | None, end: Planted, short: int = 0
) -> list[Planted]:
    """A COLL log of about `size` bytes: setup, steps, `middle` at half way, `end` last;
    `short` leaves that many world collectives out of the last step (the rank fell behind)."""
    step_bytes = len(coll_lines(writer, range(1), {"world": 0, "node": 0}).encode())
    steps = max(2, size // step_bytes)
    opcounts = {"world": 0, "node": 0}
    line = 1
    planted = [p for p in (middle, end) if p is not None]
    with path.open("wb") as out:
        head = dense_init(writer)
        out.write("".join(head).encode())
        line += len(head)
        batch = 2_000
        for first in range(0, steps, batch):
            if middle is not None and first <= steps // 2 < first + batch:
                text = coll_lines(writer, range(first, steps // 2), opcounts)
                out.write(text.encode())
                line += text.count("\n")
                middle.first = line
                out.write("".join(middle.lines).encode())
                line += len(middle.lines)
                text = coll_lines(writer, range(steps // 2, min(first + batch, steps)), opcounts)
            else:
                text = coll_lines(writer, range(first, min(first + batch, steps)), opcounts)
            if first + batch >= steps and short:
                lines = text.splitlines(keepends=True)
                mine = f"comm 0x{writer.comm('world'):012x} "
                cut = set([i for i, t in enumerate(lines) if mine in t][-short:])
                text = "".join(t for i, t in enumerate(lines) if i not in cut)
            out.write(text.encode())
            line += text.count("\n")
        end.first = line
        out.write("".join(end.lines).encode())
    for item in planted:
        item.path = str(path)
    return planted


def write_dense(path: Path, size: int) -> list[Planted]:
    """One rank's COLL log: WARN lines in the middle, the DistBackendError at the end."""
    writer = Writer(RANK)
    return write_coll_log(path, size, writer, shm_warnings(writer), backend_error(writer))


def _job_file(task: tuple[str, int, int, int, int]) -> list[Planted]:
    folder, rank, ranks, culprit, size = task
    writer = Writer(rank, ranks)
    path = Path(folder) / f"rank{rank}.log"
    if rank == culprit:
        return write_coll_log(path, size, writer, shm_warnings(writer), backend_error(writer), 3)
    steps = size // len(coll_lines(writer, range(1), {"world": 0, "node": 0}).encode())
    return write_coll_log(path, size, writer, None, watchdog_timeout(writer, steps * 12 - 2))


def write_job(folder: Path, files: int, size: int, culprit: int = 37) -> list[Planted]:
    """A job's rank logs, `files` of about `size` bytes each, written on every core."""
    culprit = culprit if culprit < files else files - 1
    tasks = [(str(folder), rank, files, culprit, size) for rank in range(files)]
    with mp.get_context("fork").Pool() as pool:
        return [p for planted in pool.map(_job_file, tasks) for p in planted]
