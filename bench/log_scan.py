"""How long `triage analyze` takes on a 1 GB rank log, against grep for the same anchors.

The baseline is what a person types first: `grep -E -c` (and `grep -E -n`) for the
anchors of the signature table, the literal strings the scanner's prefilter looks for,
so both search for the same set. Both run in this run on the same generated log (a
training loop's output with a few failures planted at known lines); the ratio is what
matters. Targets: triage at most 3x grep, and under 200 MB peak memory (the scanner
streams). The run fails only when triage crashes or finds none of the planted failures.

    python bench/log_scan.py [--size-mb 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import triage.readers.logscan  # noqa: F401  (registers the block anchors the scanner also uses)
from triage.readers import signatures

TARGET_RATIO = 3.0
TARGET_RSS_MB = 200.0
RANK = 3
HOST, PID = "gpu-node-07", 48213
BLOCK_LINES = 20_000


@dataclass
class Planted:
    """A failure written into the log, and the line range it occupies."""

    name: str
    lines: list[str]
    first: int = 0

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


def write_log(path: Path, size: int) -> list[Planted]:
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
    return [p for p in planted if p.first]


def warm(path: Path) -> None:
    """Read the log once so the first timed reader does not pay for the disk."""
    with path.open("rb") as handle:
        while handle.read(64 << 20):
            pass


def ere_escape(literal: str) -> str:
    """A literal as a POSIX ERE: only the metacharacters get a backslash (grep warns on others)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", literal)


def grep_pattern() -> str:
    return "|".join(ere_escape(a) for a in sorted(signatures.anchors(), key=len, reverse=True))


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, bytes, int]:
    """Wall seconds, exit code, stdout and this child's own peak RSS in KiB (wait4, not a sampler)."""
    # Output goes to files, never /dev/null: GNU grep stops at the first match when it sees /dev/null.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode not in (0, 1):
        sys.stderr.write(stderr.decode(errors="replace")[-2000:])
    return seconds, proc.returncode, stdout, usage.ru_maxrss


def found_by(report: dict[str, Any], item: Planted) -> list[str]:
    """What evidence points into the planted lines: signature names, or 'traceback'."""
    names = []
    for evidence in report.get("evidence", []):
        data = evidence.get("data", {})
        line = data.get("line")
        if isinstance(line, int) and item.first <= line <= item.last:
            names.append(data.get("signature") or evidence["kind"])
    return sorted(set(names))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--tmpdir", default=None, help="Where to write the log (default: system temp)."
    )
    args = parser.parse_args()
    triage = str(Path(sys.executable).parent / "triage")
    grep_env = dict(os.environ, LC_ALL="C")
    pattern = grep_pattern()
    with tempfile.TemporaryDirectory(prefix="triage-bench-", dir=args.tmpdir) as tmp:
        log = Path(tmp) / f"rank{RANK}.log"
        started = time.perf_counter()
        planted = write_log(log, args.size_mb << 20)
        generated = time.perf_counter() - started
        size = log.stat().st_size
        warm(log)
        grep_c, grep_n, ours, rss = [], [], [], []
        count = hits = 0
        report: dict[str, Any] = {}
        crashed = ""
        for _ in range(args.repeat):
            seconds, _, out, _ = timed(["grep", "-E", "-c", pattern, str(log)], grep_env)
            grep_c.append(seconds)
            count = int(out.strip() or 0)
            seconds, _, out, _ = timed(["grep", "-E", "-n", pattern, str(log)], grep_env)
            grep_n.append(seconds)
            hits = out.count(b"\n")
            seconds, code, out, peak = timed([triage, "analyze", str(log), "--json"])
            ours.append(seconds)
            rss.append(peak / 1024)
            try:
                report = json.loads(out)
            except ValueError:
                crashed = f"exit {code}, stdout is not JSON"
            if code not in (0, 1):
                crashed = f"exit {code}"
    found = {p.name: found_by(report, p) for p in planted}
    base_c, base_n, mine = (statistics.median(t) for t in (grep_c, grep_n, ours))
    print(
        f"log                {size / 2**20:,.0f} MiB, generated in {generated:.1f} s, {len(signatures.anchors())} anchors, {count} matching lines ({hits} from -n)"
    )
    print(f"grep -E -c         median {base_c:7.2f} s")
    print(f"grep -E -n         median {base_n:7.2f} s")
    print(f"triage analyze     median {mine:7.2f} s  (exit codes ok: {not crashed})")
    for label, base in (("grep -c", base_c), ("grep -n", base_n)):
        ratio = mine / base
        verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
        print(f"ratio vs {label:<9} {ratio:.2f}x  (target <= {TARGET_RATIO:.1f}x: {verdict})")
    peak_mb = max(rss)
    verdict = "met" if peak_mb <= TARGET_RSS_MB else "MISSED"
    print(f"triage peak RSS    {peak_mb:.0f} MB  (target < {TARGET_RSS_MB:.0f} MB: {verdict})")
    hypotheses = report.get("hypotheses") or []
    top = hypotheses[0]["cause_id"] if hypotheses else "none"
    print(f"top hypothesis     {top}")
    print(f"planted found      {sum(1 for v in found.values() if v)}/{len(planted)}")
    for item in planted:
        names = ", ".join(found[item.name]) or "NOT FOUND"
        print(f"  line {item.first:>10}  {item.name:<26} {names}")
    if crashed:
        print(f"triage crashed: {crashed}", file=sys.stderr)
        return 1
    return 0 if any(found.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
