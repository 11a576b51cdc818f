"""Rules that read triage.probe snapshots; each module is named by its rule ID."""
