"""Real torchrun-launched gloo jobs that fail with one planted fault each, and how they are run.

Where ``triage.scenarios`` jobs hang (for `triage hang` on live processes), these jobs fail
and leave logs behind (for `triage analyze`): the recorded fixtures under
``tests/fixtures/logs`` come from here. Importing this package needs only the standard
library and psutil; torch runs inside the launched jobs.
"""

from triage.scenarios.failures.failure_runs import (
    CONSOLE_LOG,
    FAILURES,
    FAILURES_DIR,
    LOG_DIR,
    MISSING_IFNAME,
    Failure,
    FailureRun,
    launch_command,
    launcher_available,
    run_failure,
)

__all__ = [
    "CONSOLE_LOG",
    "FAILURES",
    "FAILURES_DIR",
    "LOG_DIR",
    "MISSING_IFNAME",
    "Failure",
    "FailureRun",
    "launch_command",
    "launcher_available",
    "run_failure",
]
