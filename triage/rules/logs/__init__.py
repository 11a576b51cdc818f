"""Rules that read rank, launcher and NCCL logs; each module is named by its rule ID."""

#: The evidence kinds these rules read: without any of them in a report none can fire, and
#: the engine does not import them (a live hang has no logs).
READS = frozenset({"log_file", "log_signal", "traceback", "log_series"})
