"""Rules that read memory snapshots, summaries and OOM messages; each module is named by its rule ID."""

#: The evidence kinds these rules read: without any of them in a report none can fire, and
#: the engine does not import them (OOM messages come from logs).
READS = frozenset(
    {"memory_dump", "memory_growth", "log_file", "log_signal", "traceback", "log_series"}
)
