"""Rules that read the ranks' launch environment; each module is named by its rule ID."""
