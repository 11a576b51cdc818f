"""A framework's own check that the data-parallel replicas hold the same weights, failing:
Megatron-LM's hash of every parameter compared across the DP group (before the first
iteration with --check-weight-hash-across-dp-replicas-interval, then every N iterations)."""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "replicas.hashes_differ",
    r"Parameter hashes not matching across DP replicas",
    anchors="Parameter hashes not matching across DP replicas",
    summary="Megatron found the data-parallel replicas' weights different",
)
