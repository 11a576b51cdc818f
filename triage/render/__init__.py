"""Report renderers: terminal (rich), markdown (incident tickets), JSON (machines)."""

from __future__ import annotations

from triage.models import Report

FORMATS = ("terminal", "markdown", "json")


def render_json(report: Report) -> str:
    return report.model_dump_json(indent=2)


def confidence_label(value: float) -> str:
    return f"{round(value * 100)}%"


def short_path(path: str, keep: int = 2) -> str:
    """The last path components: enough to recognise a file at 80 columns."""
    parts = path.split("/")
    return "/".join(parts[-keep:]) if len(parts) > keep else path
