"""Waiting for a state instead of sleeping a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """`check()`'s first result that is not None, tried every 0.1 s: Slurm answers
    asynchronously, so tests wait for a state instead of sleeping a guessed time."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(0.1)
