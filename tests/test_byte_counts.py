"""The first pass's byte counts answer as `bytes.count` does: a count off by one would
merge a WARN line into a run of COLL lines and lose it."""

from __future__ import annotations

import random

import pytest

from triage.readers import byte_counts


@pytest.mark.parametrize(
    ("data", "needle", "start", "end"),
    [
        (b"aaaa", b"aa", 0, None),  # no overlaps: 2, not 3
        (b"a\nb\n\nc", b"\n", -3, None),
        (b"a\nb\n\nc", b"\n", 3, 1),  # an empty range
        (b"a\nb\n\nc", b"\n", 2, 100),
        (b"", b"\n", 0, None),
        (b"x NCCL INFO y\n NCCL INFO", b" NCCL INFO ", 1, 24),
    ],
)
def test_edges_match_bytes_count(data: bytes, needle: bytes, start: int, end: int | None) -> None:
    assert byte_counts.count(data, needle, start, end) == data.count(needle, start, end)


def test_random_stretches_match_bytes_count() -> None:
    rng = random.Random(16)
    for _ in range(3000):
        data = bytes(rng.choice(b"ab\n ") for _ in range(rng.randint(0, 400)))
        needle = bytes(rng.choice(b"ab\n ") for _ in range(rng.randint(1, 5)))
        start, end = rng.randint(-8, len(data) + 8), rng.randint(-8, len(data) + 8)
        assert byte_counts.count(data, needle, start, end) == data.count(needle, start, end)


def test_a_long_stretch_matches_bytes_count() -> None:
    """Past the SIMD kernels' block sizes, with a needle cut across every block border."""
    line = b"[rank3]:node:1:2 [3] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f\n"
    data = line * 50_000 + b"NCCL WARN /dev/shm\n" + line * 3
    for needle in (b"\n", b" NCCL INFO ", b"NCCL WARN", line):
        assert byte_counts.count(data, needle, 7, len(data) - 5) == data.count(
            needle, 7, len(data) - 5
        )
