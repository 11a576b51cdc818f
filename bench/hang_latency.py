"""How long `triage hang` takes on a live hang, against a sequential py-spy loop.

The baseline is what a person types first: `for p in PIDS; do py-spy dump --pid $p; done`.
Both run in this process's run on the same hung job; the ratio is what matters.
Target: triage at most 1.2x the baseline at 32 ranks (the dumps start before the CLI is
imported, one per core beside the import; the environment is read while the stacks are
parsed).
On a 2-core host the floor is start-up plus about half the loop.

    python bench/hang_latency.py [--ranks 32] [--repeat 7] [--scenario mismatched_collective]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from triage.scenarios import RankJob, py_spy_path

TARGET_RATIO = 1.2


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done


def sequential_py_spy(pids: list[int]) -> float:
    started = time.perf_counter()
    for pid in pids:
        subprocess.run([py_spy_path(), "dump", "--pid", str(pid)], capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--scenario", default="mismatched_collective")
    args = parser.parse_args()
    triage = [str(Path(sys.executable).parent / "triage")]
    with RankJob(args.scenario, world_size=args.ranks) as job:
        job.wait_until_stalled(timeout_s=600)  # 32 ranks start slowly on a busy 2-core host
        pids = [str(p) for p in job.pids]
        baseline, ours, startup, verdicts = [], [], [], set()
        for _ in range(args.repeat):
            baseline.append(sequential_py_spy(job.pids))
            seconds, done = timed(triage + ["hang", "--json", "--pids", *pids])
            ours.append(seconds)
            startup.append(timed(triage + ["--help"])[0])
            if done.returncode == 0:
                report = json.loads(done.stdout)
                verdicts.add(report["hypotheses"][0]["cause_id"])
    base, mine = statistics.median(baseline), statistics.median(ours)
    floor = statistics.median(startup)
    ratio = mine / base
    print(f"scenario           {args.scenario}, {args.ranks} ranks, {args.repeat} runs each")
    print(f"py-spy sequential  median {base * 1000:7.1f} ms")
    print(
        f"triage hang        median {mine * 1000:7.1f} ms  (verdicts: {', '.join(sorted(verdicts))})"
    )
    print(
        f"CLI start-up alone median {floor * 1000:7.1f} ms  ({floor / base:.2f}x: `triage --help`)"
    )
    print(
        f"ratio              {ratio:.2f}x  (target <= {TARGET_RATIO:.1f}x: {'met' if ratio <= TARGET_RATIO else 'MISSED'})"
    )
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
