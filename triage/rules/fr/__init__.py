"""Rules that read Flight Recorder dumps; each module is named by its rule ID."""

#: The evidence kinds these rules read: without any of them in a report none can fire, and
#: the engine does not import them (most reports hold no dump).
READS = frozenset({"fr_outlier", "fr_stuck", "fr_p2p", "fr_overview"})
