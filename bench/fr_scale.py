"""How long `triage analyze` takes on Flight Recorder dumps of thousands of ranks, against
torch's own analyzer on the same files.

For 256, 1,024 and 4,096 ranks (200 entries each, one rank missing from the last
collective), dumps in torch's NCCL format (tests.synthetic_fr: torch's
schema and pickle layout, files named nccl_trace_rank_<N>) are written to a temporary
folder. Both analyzers run on them in this run, as subprocesses: `triage analyze DIR
--json` and `python -m torch.distributed.flight_recorder.fr_trace DIR -p
nccl_trace_rank_` (with a time limit; a crash or timeout is recorded as such). Each
reports the culprit (triage: the top hypothesis's ranks; torch: its "missing ranks"
line); the table shows both, their times (triage: the median of --repeat runs), peak
memory (the process tree's resident set, sampled) and the ratio. Then triage alone on 4,096 ranks x 2,000 entries, and both on
the real gloo dumps of tests/fixtures (torch's analyzer expects NCCL group keys).

Targets: the same culprit as torch's analyzer, at least 20x faster at 1,024 ranks, and
4,096 x 2,000 under 10 s and 1 GB.

    python bench/fr_scale.py [--sizes 256 1024 4096] [--torch-timeout 600] [--skip-torch]
                             [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the dump writer lives in tests/, beside the checkout's code

from tests.synthetic_fr import DEFAULT_PREFIX, plant, write_dumps  # noqa: E402

TARGET_RATIO = 20.0
TARGET_SECONDS = 10.0
TARGET_MB = 1024.0
RATIO_AT = 1024
GLOO = REPO / "tests" / "fixtures" / "flight_recorder" / "mismatched_collective"


@dataclass
class Run:
    seconds: float
    peak_mb: float
    returncode: int | None  # None: killed at the time limit
    stdout: str
    stderr: str

    @property
    def outcome(self) -> str:
        if self.returncode is None:
            return "timeout"
        if self.returncode != 0:
            last = (self.stderr.strip().splitlines() or ["?"])[-1]
            return f"crash: {last[:60]}"
        return "ok"


def measure(cmd: list[str], timeout: float) -> Run:
    """Wall time and the peak resident memory of the command's whole process tree."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        peak = 0
        try:
            root = psutil.Process(proc.pid)
            while proc.poll() is None:
                if time.perf_counter() - started > timeout:
                    for child in root.children(recursive=True):
                        child.kill()
                    proc.kill()
                    break
                try:
                    tree = [root, *root.children(recursive=True)]
                    peak = max(peak, sum(p.memory_info().rss for p in tree))
                except psutil.Error:
                    pass
                time.sleep(0.02)
        finally:
            proc.wait()
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        code = None if seconds > timeout else proc.returncode
        return Run(seconds, peak / 2**20, code, out.read(), err.read())


def triage_culprits(run: Run) -> tuple[str, list[int]] | None:
    if run.returncode != 0:
        return None
    top = json.loads(run.stdout)["hypotheses"][0]
    return top["cause_id"], top["ranks"]


def torch_culprits(run: Run) -> list[int] | None:
    """torch's analyzer logs 'missing ranks: {5}' or 'Culprit rank 5; ...'."""
    text = run.stdout + run.stderr
    missing = re.findall(r"missing ranks: \{([\d, ]+)\}", text)
    if missing:
        return sorted({int(r) for r in missing[0].split(",")})
    culprits = re.findall(r"Culprit rank (\d+)", text)
    return sorted({int(r) for r in culprits}) or None


def triage_run(folder: Path, repeat: int) -> Run:
    """The median of `repeat` runs (this machine is shared; one run can be unlucky)."""
    triage = [str(Path(sys.executable).parent / "triage"), "analyze", str(folder), "--json"]
    runs = sorted((measure(triage, timeout=600) for _ in range(repeat)), key=lambda r: r.seconds)
    median = runs[len(runs) // 2]
    median.peak_mb = max(r.peak_mb for r in runs)
    return median


def analyzers(folder: Path, args: argparse.Namespace, prefix: str) -> tuple[Run, Run | None]:
    ours = triage_run(folder, args.repeat)
    if args.skip_torch:
        return ours, None
    torch = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)]
    theirs = measure([*torch, "-p", prefix], timeout=args.torch_timeout)
    return ours, theirs


def row(label: str, expected: list[int], ours: Run, theirs: Run | None) -> tuple[str, bool]:
    verdict = triage_culprits(ours)
    mine = verdict[1] if verdict else None
    cause = verdict[0] if verdict else ours.outcome
    if theirs is None:
        torch_text, same, ratio = "skipped", None, ""
    elif theirs.outcome != "ok":
        torch_text, same, ratio = theirs.outcome, None, ""
    else:
        found = torch_culprits(theirs)
        torch_text = f"{theirs.seconds:7.1f} s {theirs.peak_mb:6.0f} MB  culprit {found}"
        same = found == mine
        ratio = f"{theirs.seconds / ours.seconds:6.1f}x"
    ok = mine == expected and same is not False
    text = (
        f"{label:<22} triage {ours.seconds:6.2f} s {ours.peak_mb:6.0f} MB  {cause} {mine}"
        f" | torch {torch_text} | same {'-' if same is None else 'yes' if same else 'NO'}"
        f" {ratio}"
    )
    return text, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--big-entries", type=int, default=2000)
    parser.add_argument("--torch-timeout", type=float, default=600.0)
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="triage runs per case (median)")
    args = parser.parse_args()
    lines, met = [], True
    ratios: dict[int, float] = {}
    for ranks in args.sizes:
        with tempfile.TemporaryDirectory(prefix="fr-scale-") as tmp:
            culprit = ranks // 3
            job, calls, planted = plant("rank_not_in_collective", ranks, args.entries, culprit)
            write_dumps(Path(tmp), job, calls)
            os.sync()  # written back now, not during a timed run
            ours, theirs = analyzers(Path(tmp), args, DEFAULT_PREFIX)
        text, ok = row(f"{ranks} x {args.entries}", list(planted.culprits), ours, theirs)
        lines.append(text)
        met &= ok
        if theirs is not None and theirs.outcome == "ok":
            ratios[ranks] = theirs.seconds / ours.seconds
        print(text, flush=True)
    big_ok = True
    if args.big_entries > 0:  # --big-entries 0 skips the long-history run
        with tempfile.TemporaryDirectory(prefix="fr-scale-") as tmp:
            ranks = max(args.sizes)
            job, calls, planted = plant(
                "rank_not_in_collective", ranks, args.big_entries, ranks // 3
            )
            write_dumps(Path(tmp), job, calls)
            os.sync()  # written back now, not during a timed run
            big = triage_run(Path(tmp), args.repeat)
        text, ok = row(f"{ranks} x {args.big_entries}", list(planted.culprits), big, None)
        print(text, flush=True)
        lines.append(text)
        big_ok = ok and big.seconds < TARGET_SECONDS and big.peak_mb < TARGET_MB
    with tempfile.TemporaryDirectory(prefix="fr-scale-") as tmp:
        for path in GLOO.glob("*.pickle"):  # renamed the way torch's analyzer reads names
            shutil.copy(path, Path(tmp) / f"{DEFAULT_PREFIX}{path.stem.rpartition('rank')[2]}")
        ours, theirs = analyzers(Path(tmp), args, DEFAULT_PREFIX)
    text, _ = row("real gloo, 4 ranks", [0], ours, theirs)
    print(text, flush=True)
    ratio_ok = ratios.get(RATIO_AT, 0.0) >= TARGET_RATIO or args.skip_torch
    print()
    print(f"same culprit as torch's analyzer everywhere it ran: {'met' if met else 'MISSED'}")
    if RATIO_AT in ratios:
        print(
            f"speed at {RATIO_AT} ranks: {ratios[RATIO_AT]:.1f}x (target >= {TARGET_RATIO:.0f}x: "
            f"{'met' if ratio_ok else 'MISSED'})"
        )
    if args.big_entries > 0:
        print(
            f"{max(args.sizes)} x {args.big_entries}: {big.seconds:.2f} s, {big.peak_mb:.0f} MB "
            f"(target < {TARGET_SECONDS:.0f} s and < {TARGET_MB:.0f} MB: "
            f"{'met' if big_ok else 'MISSED'})"
        )
    return 0 if met and ratio_ok and big_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
