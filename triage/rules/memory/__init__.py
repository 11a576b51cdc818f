"""Rules that read memory snapshots, summaries and OOM messages; each module is named by its rule ID."""
