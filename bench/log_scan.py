"""How long `triage analyze` takes on logs shaped like real ones, against grep for the same anchors.

The baseline is what a person types first: `grep -E -c` (and `grep -E -n`) for the
anchors of the signature table, the literal strings the scanner's prefilter looks for,
so both search for the same set, in this run, on the same files. bench/log_shapes.py
writes the files, with failures planted at known lines:

- sparse: a 1 GB rank log of a training loop, four failures planted (few matching lines);
- dense: a 1 GB NCCL_DEBUG_SUBSYS=COLL rank log, every line a matching per-op INFO line,
  two NCCL WARN shared-memory lines buried in the middle, a DistBackendError at the end;
- job: a folder of 64 rank logs of 100 MB each like the dense one: one rank ran out of
  /dev/shm, every other rank's watchdog times out;
- steps: a 1 GB training log whose every line is a step's metrics with its GPU memory
  (torchtitan's `step: 10  loss: 2.31  memory: 61.30GiB(77.45%)`), a CUDA OOM at the end.

Reported per case: the ratios to grep, triage's peak RSS (its largest process, from wait4:
the pool's workers are its children) and the peak proportional set size of all its
processes together (sampled), every planted line found or not, and the top hypothesis.
Targets: at most 3x grep and under 200 MB peak RSS; every planted line found; the dense
log and the job say comm.shm_exhausted, the steps log an OOM of GPU capacity. Exit 1 when triage crashes or misses a line.

    python bench/log_scan.py [--cases sparse,dense,job,steps] [--size-mb 1024] [--files 64]
                             [--file-mb 100] [--repeat 3] [--tmpdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from triage.readers import signatures

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the log shapes live beside this file, in bench/

from bench.log_shapes import (  # noqa: E402
    Planted,
    write_dense,
    write_job,
    write_sparse,
    write_steps,
)

TARGET_RATIO = 3.0
TARGET_RSS_MB = 200.0
EXPECTED = {"dense": "comm.shm_exhausted", "job": "comm.shm_exhausted", "steps": "oom.capacity"}


@dataclass
class Case:
    """One shape: where its files are and what was planted in them."""

    name: str
    target: Path
    files: list[Path]
    planted: list[Planted]
    generated: float


@dataclass
class Run:
    """The medians of one case's timings and what triage reported."""

    grep_c: list[float] = field(default_factory=list)
    grep_n: list[float] = field(default_factory=list)
    triage: list[float] = field(default_factory=list)
    grep_cpu: list[float] = field(default_factory=list)
    triage_cpu: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    pss_mb: list[float] = field(default_factory=list)
    matching: int = 0
    report: dict[str, Any] = field(default_factory=dict)
    crashed: str = ""


def warm(files: list[Path]) -> None:
    """Read the logs once so the first timed reader does not pay for the disk."""
    for path in files:
        with path.open("rb") as handle:
            while handle.read(64 << 20):
                pass


def ere_escape(literal: str) -> str:
    """A literal as a POSIX ERE: only the metacharacters get a backslash (grep warns on others)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", literal)


def grep_pattern() -> str:
    return "|".join(ere_escape(a) for a in sorted(signatures.anchors(), key=len, reverse=True))


@dataclass
class Timed:
    """One command's run."""

    seconds: float
    cpu: float  # user + system seconds of it and the children it waited for
    code: int
    stdout: bytes
    rss_kib: int  # its peak RSS, or its largest reaped child's (wait4)
    pss_kib: int  # the peak PSS of it and its children together (sampled), 0 unsampled


def timed(cmd: list[str], env: dict[str, str] | None = None, *, sample: bool = False) -> Timed:
    """Run a command to the end, as wait4 reports it (not a sampler), and with `sample`
    the PSS of its process tree every 50 ms."""
    # Output goes to files, never /dev/null: GNU grep stops at the first match when it sees /dev/null.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        peak = [0]
        done = threading.Event()
        sampler = threading.Thread(target=_sample_pss, args=(proc.pid, peak, done))
        if sample:
            sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        done.set()
        if sample:
            sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read() if cmd[0] != "grep" or "-c" in cmd else b""
        stderr = err.read()
    if proc.returncode not in (0, 1):
        sys.stderr.write(stderr.decode(errors="replace")[-2000:])
    cpu = usage.ru_utime + usage.ru_stime
    return Timed(seconds, cpu, proc.returncode, stdout, usage.ru_maxrss, peak[0])


def _sample_pss(pid: int, peak: list[int], done: threading.Event) -> None:
    """The largest sum of PSS over a process and its children, until `done`."""
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    while not done.wait(0.05):
        total = 0
        try:
            for proc in [root, *root.children(recursive=True)]:
                total += proc.memory_full_info().pss
        except psutil.Error:
            continue
        peak[0] = max(peak[0], total // 1024)


def found_by(report: dict[str, Any], item: Planted) -> list[str]:
    """What evidence points into the planted lines: signature names, or 'traceback'."""
    names = []
    for evidence in report.get("evidence", []):
        data = evidence.get("data", {})
        line = data.get("line")
        same_file = Path(str(data.get("path", ""))).name == Path(item.path).name
        if same_file and isinstance(line, int) and item.first <= line <= item.last:
            names.append(data.get("signature") or evidence["kind"])
    return sorted(set(names))


def make(name: str, folder: Path, args: argparse.Namespace) -> Case:
    started = time.perf_counter()
    if name == "job":
        target = folder / "job"
        target.mkdir()
        planted = write_job(target, args.files, args.file_mb << 20)
        files = sorted(target.iterdir())
    else:
        target = folder / f"{name}" / "rank3.log"
        target.parent.mkdir()
        writer: Callable[[Path, int], list[Planted]] = {
            "dense": write_dense,
            "steps": write_steps,
        }.get(name, write_sparse)
        planted = writer(target, args.size_mb << 20)
        files = [target]
    seconds = time.perf_counter() - started
    os.sync()  # written-back now, not by the kernel in the middle of a timed run
    return Case(name, target, files, planted, seconds)


def measure(case: Case, repeat: int) -> Run:
    triage_cli = str(Path(sys.executable).parent / "triage")
    grep_env = dict(os.environ, LC_ALL="C")
    names = [str(p) for p in case.files]
    pattern = grep_pattern()
    run = Run()
    for _ in range(repeat):
        warm(case.files)
        grep = timed(["grep", "-E", "-c", pattern, *names], grep_env)
        run.grep_c.append(grep.seconds)
        run.grep_cpu.append(grep.cpu)
        run.matching = sum(int(c.rsplit(":", 1)[-1]) for c in grep.stdout.decode().split())
        run.grep_n.append(timed(["grep", "-E", "-n", pattern, *names], grep_env).seconds)
        warm(case.files)  # grep -n wrote as much as it read: the logs may have left the cache
        ours = timed([triage_cli, "analyze", str(case.target), "--json"], sample=True)
        run.triage.append(ours.seconds)
        run.triage_cpu.append(ours.cpu)
        run.rss_mb.append(ours.rss_kib / 1024)
        run.pss_mb.append(ours.pss_kib / 1024)
        try:
            run.report = json.loads(ours.stdout)
        except ValueError:
            run.crashed = f"exit {ours.code}, stdout is not JSON"
        if ours.code not in (0, 1):
            run.crashed = f"exit {ours.code}"
    return run


def show(case: Case, run: Run) -> bool:
    """Print one case's figures; whether every planted line was found."""
    size = sum(p.stat().st_size for p in case.files)
    base_c, base_n, mine = (statistics.median(t) for t in (run.grep_c, run.grep_n, run.triage))
    print(
        f"\n== {case.name}: {size / 2**20:,.0f} MiB in {len(case.files)} file(s), generated in "
        f"{case.generated:.1f} s, {run.matching:,} matching lines"
    )
    print(f"grep -E -c         median {base_c:7.2f} s")
    print(f"grep -E -n         median {base_n:7.2f} s")
    print(f"triage analyze     median {mine:7.2f} s  (exit codes ok: {not run.crashed})")
    for label, base in (("grep -c", base_c), ("grep -n", base_n)):
        ratio = mine / base
        verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
        print(f"ratio vs {label:<9} {ratio:.2f}x  (target <= {TARGET_RATIO:.1f}x: {verdict})")
    cpu_grep, cpu_mine = statistics.median(run.grep_cpu), statistics.median(run.triage_cpu)
    print(
        f"CPU seconds        grep -c {cpu_grep:.2f}, triage {cpu_mine:.2f} in all its processes "
        f"({cpu_mine / max(cpu_grep, 0.01):.2f}x; the wall ratio is the target)"
    )
    rss = max(run.rss_mb)
    verdict = "met" if rss <= TARGET_RSS_MB else "MISSED"
    print(
        f"peak RSS           {rss:.0f} MB, its largest process (target < {TARGET_RSS_MB:.0f} MB: "
        f"{verdict}); {max(run.pss_mb):.0f} MB PSS of all its processes"
    )
    hypotheses = run.report.get("hypotheses") or []
    top = hypotheses[0]["cause_id"] if hypotheses else "none"
    confidence = f" {hypotheses[0]['confidence']:.2f}" if hypotheses else ""
    expected = EXPECTED.get(case.name)
    judged = f" (expected {expected}: {'met' if top == expected else 'MISSED'})" if expected else ""
    print(f"top hypothesis     {top}{confidence}{judged}")
    found = {id(p): found_by(run.report, p) for p in case.planted}
    print(f"planted found      {sum(1 for v in found.values() if v)}/{len(case.planted)}")
    shown = [p for p in case.planted if not found[id(p)] or len(case.planted) <= 8]
    shown = shown or [p for p in case.planted if "WARN" in p.name or "Error" in p.name]
    for item in shown:
        names = ", ".join(found[id(item)]) or "NOT FOUND"
        print(f"  {Path(item.path).name:<11} line {item.first:>10}  {item.name:<28} {names}")
    return all(found.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="sparse,dense,job,steps")
    parser.add_argument(
        "--size-mb", type=int, default=1024, help="The sparse, dense and steps logs."
    )
    parser.add_argument("--files", type=int, default=64, help="Rank logs in the job folder.")
    parser.add_argument("--file-mb", type=int, default=100, help="Each rank log of the job.")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tmpdir", default=None, help="Where to write (default: system temp).")
    args = parser.parse_args()
    print(f"{len(signatures.anchors())} anchors, {os.cpu_count()} cores")
    ok = True
    for name in args.cases.split(","):
        with tempfile.TemporaryDirectory(prefix="triage-bench-", dir=args.tmpdir) as tmp:
            case = make(name, Path(tmp), args)
            run = measure(case, args.repeat)
            ok = show(case, run) and ok
            if run.crashed:
                print(f"triage crashed: {run.crashed}", file=sys.stderr)
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
