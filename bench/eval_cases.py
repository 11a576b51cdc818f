"""How often `triage analyze` names the right cause on real cases from public issue trackers.

Each case's `evidence` (the text its reporter posted) goes to `triage analyze - --json`
on stdin, as a user would paste it; the top hypothesis is right when its cause ID is the
case's `cause` or one of its `accept` IDs. Prints each case and the accuracy, top-1 and
top-2. The cases live outside the project (`../shared/cases` next to the checkout) and
are read in place, never copied; without them the run skips and exits 0. It exits
non-zero only when triage crashes on a case.

    python bench/eval_cases.py [--cases PATH] [--json] [--verbose] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CASES = REPO.parent / "shared" / "cases" / "dev.json"


@dataclass
class Result:
    """One case scored: what was expected, what triage said, and whether that is right."""

    id: str
    expected: str
    accept: list[str]
    got: str | None
    ok: bool
    top2_ok: bool
    top2: list[dict[str, Any]]
    exit_code: int
    error: str = ""
    report: dict[str, Any] = field(default_factory=dict, repr=False)


def load_cases(path: Path) -> list[dict[str, Any]]:
    """A cases file, or every `*.json` cases file in a folder."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    cases: list[dict[str, Any]] = []
    for file in files:
        payload = json.loads(file.read_text())
        cases += payload if isinstance(payload, list) else payload.get("cases", [])
    return [c for c in cases if isinstance(c, dict) and c.get("evidence") and c.get("cause")]


def run_case(triage: str, case: dict[str, Any]) -> Result:
    done = subprocess.run(
        [triage, "analyze", "-", "--json"],
        input=case["evidence"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    right = {case["cause"], *case.get("accept", [])}
    try:
        report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Result(
            case["id"],
            case["cause"],
            case.get("accept", []),
            None,
            False,
            False,
            [],
            done.returncode,
            error=last,
        )
    hypotheses = report.get("hypotheses", [])
    top2 = [
        {"cause_id": h["cause_id"], "confidence": h["confidence"], "ranks": h.get("ranks", [])}
        for h in hypotheses[:2]
    ]
    got = top2[0]["cause_id"] if top2 else None
    return Result(
        id=case["id"],
        expected=case["cause"],
        accept=case.get("accept", []),
        got=got,
        ok=got in right,
        top2_ok=any(h["cause_id"] in right for h in top2),
        top2=top2,
        exit_code=done.returncode,
        report=report,
    )


def describe_miss(result: Result) -> str:
    """What the report rested on: its hypotheses, evidence and gaps, a few lines each."""
    report = result.report
    lines = [f"--- {result.id}: expected {result.expected}, got {result.got or 'nothing'}"]
    if result.error:
        lines.append(f"  error: {result.error}")
    for h in report.get("hypotheses", [])[:3]:
        ranks = f" ranks {h['ranks']}" if h.get("ranks") else ""
        lines.append(f"  {h['cause_id']} {h['confidence']:.2f}{ranks}: {h['summary'][:160]}")
    evidence = report.get("evidence", [])
    lines.append(f"  evidence ({len(evidence)}):")
    lines += [f"    {e['kind']}: {e['summary'][:150]}" for e in evidence[:8]]
    lines += [f"  gap: {g['reason']}" for g in report.get("gaps", [])]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", type=Path, help=f"Cases file or folder (default {DEFAULT_CASES})."
    )
    parser.add_argument("--json", action="store_true", help="Machine-readable results.")
    parser.add_argument("--verbose", action="store_true", help="Show the report of each miss.")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    args = parser.parse_args()
    path = args.cases or DEFAULT_CASES
    if not path.exists():
        if args.cases:
            print(f"eval_cases: no such cases file or folder: {path}", file=sys.stderr)
            return 2
        print(f"eval_cases: skipped, no cases at {path}")
        return 0
    cases = load_cases(path)
    triage = str(Path(sys.executable).parent / "triage")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda case: run_case(triage, case), cases))
    total = len(results) or 1
    accuracy = sum(r.ok for r in results) / total
    top2_accuracy = sum(r.top2_ok for r in results) / total
    crashed = [r for r in results if r.error]
    if args.json:
        rows = [{k: v for k, v in asdict(r).items() if k != "report"} for r in results]
        payload = {
            "cases_file": str(path),
            "n": len(results),
            "accuracy": accuracy,
            "top2_accuracy": top2_accuracy,
            "cases": rows,
        }
        print(json.dumps(payload, indent=2))
    else:
        width = max((len(r.id) for r in results), default=2)
        print(f"{'id':<{width}}  {'expected':<28} {'got':<28} ok  top-2")
        for r in results:
            top2 = ", ".join(f"{h['cause_id']} {h['confidence']:.2f}" for h in r.top2) or "-"
            mark = "yes" if r.ok else "no "
            print(f"{r.id:<{width}}  {r.expected:<28} {r.got or '-':<28} {mark} {top2}")
        print(f"\n{len(results)} cases from {path}")
        print(f"accuracy (top-1)   {accuracy:.0%}  ({sum(r.ok for r in results)}/{len(results)})")
        print(
            f"accuracy (top-2)   {top2_accuracy:.0%}  ({sum(r.top2_ok for r in results)}/{len(results)})"
        )
        if crashed:
            print(f"triage crashed on {len(crashed)}: {', '.join(r.id for r in crashed)}")
    if args.verbose:
        for r in results:
            if not r.ok:
                print(describe_miss(r), file=sys.stderr if args.json else sys.stdout)
    return 1 if crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
