"""Give each corpus case without a split its split, once: a third `check`, the rest `dev`.

The draw is a hash of the case's ID, so it is random with respect to the case's content,
the same on every machine, and never moves a case that has its split already: `check`
stays unread while rules are written, and is scored only by `bench/eval_cases.py`.

    python bench/split_cases.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "cases"


def split_of(case_id: str) -> str:
    digest = hashlib.sha256(case_id.encode()).digest()
    return "check" if digest[0] % 3 == 0 else "dev"


def main() -> int:
    counts: dict[str, int] = {}
    for path in sorted(CORPUS.rglob("*.json")):
        case = json.loads(path.read_text(encoding="utf-8"))
        if "split" not in case:
            case["split"] = split_of(case["id"])
            path.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        counts[case["split"]] = counts.get(case["split"], 0) + 1
    print(", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "no cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
