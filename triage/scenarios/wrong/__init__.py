"""Real gloo jobs whose replicas go wrong in one planted way each, and how they are run.

Where ``triage.scenarios.failures`` jobs fail with an error in their logs, these jobs
mostly finish: the evidence is inside the processes, and each rank writes it with
``triage.probe.snapshot()``. The recorded fixtures under ``tests/fixtures/probe`` come from
here. Importing this package needs only the standard library and psutil.
"""

from triage.scenarios.wrong.wrong_runs import (
    LOG_DIR,
    PROBE_DIR,
    WRONG_DIR,
    WRONG_JOBS,
    WrongJob,
    WrongRun,
    run_wrong,
)

__all__ = ["LOG_DIR", "PROBE_DIR", "WRONG_DIR", "WRONG_JOBS", "WrongJob", "WrongRun", "run_wrong"]
