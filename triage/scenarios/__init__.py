"""Real multi-process gloo jobs with one planted hang each, and a harness to run them.

Used by the scenario tests, ``make demo`` and the benchmark. Importing this package needs
only the standard library and psutil; torch is needed by the job scripts, which run as
separate processes.
"""

from triage.scenarios.harness import (
    ARMED_LINE,
    CAUSE_IDS,
    CULPRITS,
    DEFAULT_WORLD_SIZE,
    EXPECTED_EXITED,
    JOBS_DIR,
    SCENARIOS,
    RankJob,
    ScenarioError,
    culprits,
    exiting_ranks,
    free_port,
    main_thread,
    pid_alive,
    py_spy_dump,
    py_spy_path,
    roles,
    stack_signature,
)

__all__ = [
    "ARMED_LINE",
    "CAUSE_IDS",
    "CULPRITS",
    "DEFAULT_WORLD_SIZE",
    "EXPECTED_EXITED",
    "JOBS_DIR",
    "SCENARIOS",
    "RankJob",
    "ScenarioError",
    "culprits",
    "exiting_ranks",
    "free_port",
    "main_thread",
    "pid_alive",
    "py_spy_dump",
    "py_spy_path",
    "roles",
    "stack_signature",
]
