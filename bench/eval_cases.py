"""How often `triage analyze` names the right cause on real cases from public issue trackers.

Each case's `evidence` (the text its reporter posted) goes to `triage analyze - --json`
on stdin, as a user would paste it; the top hypothesis is right when its cause ID is the
case's `cause` or one of its `accept` IDs, and its category is right when its family is.

Two sets of cases: the project's corpus (`tests/cases/<category>/<id>.json`), split once
at random into `dev` (rules may be written from it) and `check` (scored only, never read
while writing rules), and the design's development cases (`../shared/cases/dev.json` next
to the checkout, read in place, never copied; `shared`). Prints, per split, a table per
category (cases, cause right, category right, top-2 right, no hypothesis) and a
calibration table (confidence bucket, cases, share right); each case's line only for the
splits rules may be written from. Exits non-zero only when triage crashes on a case.

With --reported-symptom each case also gets the symptom its reporter saw (`symptom`,
labelled from the report's own words and output, blind to its cause), as a user who types
`triage hang` or `triage oom` would: what the tool answers when told what was seen.

    python bench/eval_cases.py [--split dev|check|shared|all] [--cases PATH] [--json]
                               [--verbose] [--jobs N] [--dress kubectl|cut-80|...]
                               [--reported-symptom]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "cases"
SHARED = REPO.parent / "shared" / "cases" / "dev.json"
CATEGORIES = ("hang", "comm", "oom", "wrong", "config")
#: Splits whose cases may be read one by one; `check` is only ever summed up.
READABLE = ("dev", "shared")
BUCKETS = ((0.8, 1.01), (0.5, 0.8), (0.3, 0.5), (0.0, 0.3))


@dataclass
class Result:
    """One case scored: what was expected, what triage said, and whether that is right."""

    id: str
    split: str
    category: str
    expected: str
    accept: list[str]
    got: str | None
    confidence: float | None
    ok: bool
    category_ok: bool
    top2_ok: bool
    top2: list[dict[str, Any]]
    exit_code: int
    error: str = ""
    report: dict[str, Any] = field(default_factory=dict, repr=False)


def load_cases(path: Path, split: str | None = None) -> list[dict[str, Any]]:
    """A cases file (a JSON list), a case file (one object), or a folder of either, searched
    recursively; `split` labels cases that carry none."""
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    cases: list[dict[str, Any]] = []
    for file in files:
        payload = json.loads(file.read_text())
        found = payload if isinstance(payload, list) else [payload]
        cases += [c for c in found if isinstance(c, dict)]
    for case in cases:
        case.setdefault("split", split or "dev")
        case["category"] = family(case.get("cause"))  # `comm_error` and `comm` alike
    return [c for c in cases if c.get("evidence") and c.get("cause")]


def _each_line(prefix: str) -> Callable[[str], str]:
    return lambda text: "\n".join(prefix + line for line in text.splitlines())


def _cut(text: str, width: int) -> str:
    """Every line cut into pieces of `width` characters, as a terminal's copy cuts it."""
    return "\n".join(
        line[start : start + width]
        for line in text.splitlines()
        for start in range(0, max(len(line), 1), width)
    )


def _records(text: str) -> str:
    """Every line as Docker's json-file driver writes it: a JSON record per line."""
    stamp = "2024-05-01T10:00:00.123456789Z"
    return "\n".join(
        json.dumps({"log": line + "\n", "stream": "stderr", "time": stamp})
        for line in text.splitlines()
    )


#: How log collectors and reports dress a log's lines (`--dress`).
DRESSES: dict[str, Callable[[str], str]] = {
    "kubectl": _each_line("2024-05-01T10:00:00.123456789Z "),
    "srun-label": _each_line("  3: "),
    "quoted": _each_line("> "),
    "indented": _each_line("    "),
    "html": lambda text: html.escape(text, quote=True),
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "docker-json": _records,
    "cut-80": lambda text: _cut(text, 80),
    "cut-120": lambda text: _cut(text, 120),
    "numbered": lambda text: "\n".join(
        f"{number:>4}  {line}" for number, line in enumerate(text.splitlines(), 1)
    ),
}


def family(cause: str | None) -> str:
    return (cause or "").split(".")[0]


def run_case(triage: str, case: dict[str, Any], reported: bool = False) -> Result:
    """`triage analyze` on the case's evidence; with `reported`, and the case's `symptom` one a
    user would type (hang, oom, wrong-results; not `error`), as `--symptom` too."""
    symptom = case.get("symptom") if reported else None
    given = ["--symptom", symptom] if symptom and symptom != "error" else []
    done = subprocess.run(
        [triage, "analyze", "-", "--json", *given],
        input=case["evidence"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    right = {case["cause"], *case.get("accept", [])}
    scored = {"id": case["id"], "split": case["split"], "category": case["category"]}
    scored |= {"expected": case["cause"], "accept": case.get("accept", [])}
    try:
        report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Result(**scored, got=None, confidence=None, ok=False, category_ok=False,
                      top2_ok=False, top2=[], exit_code=done.returncode, error=last)  # fmt: skip
    hypotheses = report.get("hypotheses", [])
    top2 = [
        {"cause_id": h["cause_id"], "confidence": h["confidence"], "ranks": h.get("ranks", [])}
        for h in hypotheses[:2]
    ]
    got = top2[0]["cause_id"] if top2 else None
    return Result(
        **scored,
        got=got,
        confidence=top2[0]["confidence"] if top2 else None,
        ok=got in right,
        category_ok=family(got) in {family(c) for c in right},
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


def _share(part: int, whole: int) -> str:
    return f"{part / whole:4.0%} ({part}/{whole})" if whole else "   -"


def category_table(results: list[Result]) -> list[str]:
    """Per category: cases, cause right, category right, top-2 right, no hypothesis."""
    head = f"{'category':<9} {'cases':>5}  {'cause right':<15} {'category right':<15} {'top-2 right':<15} no hypothesis"
    lines = [head]
    for name in (*CATEGORIES, "all"):
        rows = results if name == "all" else [r for r in results if r.category == name]
        if not rows:
            continue
        n = len(rows)
        lines.append(
            f"{name:<9} {n:>5}  {_share(sum(r.ok for r in rows), n):<15}"
            f" {_share(sum(r.category_ok for r in rows), n):<15}"
            f" {_share(sum(r.top2_ok for r in rows), n):<15} {sum(r.got is None for r in rows)}"
        )
    unknown = sum(
        r.ok and r.got != r.expected and (r.got or "").endswith(".unknown") for r in results
    )
    lines.append(f"of the causes right, {unknown} by a category-level .unknown the case accepts")
    return lines


def calibration_table(results: Iterable[Result]) -> list[str]:
    """Per confidence bucket of the top hypothesis: how many, and how many were right."""
    scored = [r for r in results if r.confidence is not None]
    lines = [f"{'confidence':<11} {'cases':>5}  right"]
    for low, high in BUCKETS:
        rows = [r for r in scored if low <= (r.confidence or 0.0) < high]
        label = f">= {low:.1f}" if high > 1 else f"{low:.1f}-{high:.1f}"
        lines.append(f"{label:<11} {len(rows):>5}  {_share(sum(r.ok for r in rows), len(rows))}")
    return lines


def gather(split: str, path: Path | None) -> list[dict[str, Any]]:
    if path is not None:
        return load_cases(path)
    cases: list[dict[str, Any]] = []
    if split in ("dev", "check", "all") and CORPUS.is_dir():
        cases += [c for c in load_cases(CORPUS) if split == "all" or c["split"] == split]
    if split in ("shared", "all") and SHARED.exists():
        cases += load_cases(SHARED, "shared")
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("dev", "check", "shared", "all"), default="all")
    parser.add_argument("--cases", type=Path, help="Another cases file or folder.")
    parser.add_argument("--json", action="store_true", help="Machine-readable results.")
    parser.add_argument("--verbose", action="store_true", help="Show the report of each miss.")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument(
        "--reported-symptom",
        action="store_true",
        help="Also give each case the symptom its reporter saw (the case's `symptom`: hang, oom,"
        " wrong-results), as a user types `triage hang`; `error` cases run as before.",
    )
    parser.add_argument(
        "--dress",
        choices=sorted(DRESSES),
        help="Paste every case the way a tool or a report dresses it (a timestamp per line,"
        " quote marks, HTML escapes, ...): the verdicts must not change.",
    )
    args = parser.parse_args()
    if args.cases is not None and not args.cases.exists():
        print(f"eval_cases: no such cases file or folder: {args.cases}", file=sys.stderr)
        return 2
    cases = gather(args.split, args.cases)
    if args.dress:
        cases = [case | {"evidence": DRESSES[args.dress](case["evidence"])} for case in cases]
    if not cases:
        print(f"eval_cases: skipped, no cases for split {args.split}")
        return 0
    triage = str(Path(sys.executable).parent / "triage")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda case: run_case(triage, case, args.reported_symptom), cases))
    splits = sorted(
        {r.split for r in results},
        key=lambda s: ("dev", "check", "shared").index(s) if s in ("dev", "check", "shared") else 9,
    )
    crashed = [r for r in results if r.error]
    if args.json:
        rows = [
            {k: v for k, v in asdict(r).items() if k != "report"}
            for r in results
            if r.split in READABLE or args.cases
        ]
        print(json.dumps({"n": len(results), "cases": rows}, indent=2))
    else:
        for split in splits:
            chosen = [r for r in results if r.split == split]
            if split in READABLE or args.cases:
                width = max(len(r.id) for r in chosen)
                print(f"{'id':<{width}}  {'expected':<28} {'got':<28} ok  top-2")
                for r in chosen:
                    top2 = ", ".join(f"{h['cause_id']} {h['confidence']:.2f}" for h in r.top2)
                    mark = "yes" if r.ok else "no "
                    print(
                        f"{r.id:<{width}}  {r.expected:<28} {r.got or '-':<28} {mark} {top2 or '-'}"
                    )
                print()
            print(f"split {split}: {len(chosen)} cases")
            print("\n".join(category_table(chosen)))
            print("\n".join(calibration_table(chosen)) + "\n")
        if len(splits) > 1:
            print("all splits: calibration")
            print("\n".join(calibration_table(results)))
        if crashed:
            print(f"triage crashed on {len(crashed)} cases")
    if args.verbose:
        for r in results:
            if not r.ok and (r.split in READABLE or args.cases):
                print(describe_miss(r), file=sys.stderr if args.json else sys.stdout)
    return 1 if crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
