"""Write evidence.json beside this file from a live run of a real hung gloo job.

    .venv/bin/python tests/rules/stacks.rank_exited/live_rank_exited/record.py

Runs triage/scenarios/jobs/rank_exited.py (4 CPU gloo ranks; rank 3 exits at start-up and
ranks 0-2 wait in init_process_group), waits until it stalls, runs `triage hang --json
--pids` on the live ranks as a user would, and keeps the report's live-only evidence: the
processes found, the rank no live process holds, and the py-spy stacks (the environment
items are left out to keep the file small).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from triage.scenarios import RankJob

HERE = Path(__file__).resolve().parent
KEEP = ("process", "missing_rank", "stack")

if __name__ == "__main__":
    with RankJob("rank_exited") as job:
        job.wait_until_stalled()
        live = [job.pids[r] for r in job.live_ranks()]
        done = subprocess.run(
            [sys.executable, "-m", "triage", "hang", "--json", "--pids", *map(str, live)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    items = [e for e in json.loads(done.stdout)["evidence"] if e["kind"] in KEEP]
    (HERE / "evidence.json").write_text(json.dumps(items, indent=1) + "\n")
