"""Shared fixtures: the bundled tools and rules are registered once per session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from triage.plugins import load_all

REPO = Path(__file__).resolve().parent.parent
load_all()


def triage_cli(*args: str) -> list[str]:
    """The `triage` command as this interpreter runs it."""
    return [sys.executable, "-m", "triage", *args]


requires_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="needs the torch extra"
)
