"""Rules that read triage.probe snapshots; each module is named by its rule ID."""

#: The evidence kinds these rules read: without any of them in a report none can fire, and
#: the engine does not import them (most jobs run without the probe).
READS = frozenset({"probe_snapshot", "replica_check", "probe_request"})
