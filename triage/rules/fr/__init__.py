"""Rules that read Flight Recorder dumps; each module is named by its rule ID."""
