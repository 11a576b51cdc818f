"""`triage demo`: a real job, a real hang, a real triage, in about half a minute.

Launches a built-in 4-rank gloo job with a planted bug, waits until its ranks stall,
runs the hang playbook on the live pids and prints the report; the job is always
cleaned up, even when something fails.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable

from triage.engine import diagnose, job_targets
from triage.errors import TriageError
from triage.models import Report


class DemoError(TriageError):
    pass


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_demo(scenario: str, show: Callable[[Report], None]) -> Report:
    from triage.scenarios import SCENARIOS, RankJob

    if scenario not in SCENARIOS:
        raise DemoError(f"unknown scenario {scenario!r} (have: {', '.join(sorted(SCENARIOS))})")
    if importlib.util.find_spec("torch") is None:
        raise DemoError("the demo job needs torch: pip install 'triage[torch]'")
    with RankJob(scenario) as job:
        say(f"demo: launched {len(job.pids)} gloo ranks of {job.script.name} (pids {job.pids})")
        say("demo: waiting until the job hangs ...")
        job.wait_until_stalled()
        say(f"demo: hung; running `triage hang --pids {' '.join(map(str, job.pids))}`\n")
        report = diagnose("hang", job_targets(pids=job.pids))
        show(report)
    say("demo: job cleaned up")
    return report
