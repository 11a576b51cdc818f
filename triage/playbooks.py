"""Playbooks: what to gather for a symptom, in which order, and which rules decide.

A playbook is a Markdown file: TOML front matter between `+++` lines for the engine,
then the steps in prose for a person or an agent following it by hand.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from triage.errors import TriageError
from triage.models import Contract
from triage.plugins import bundled_dir, plugin_dirs


class PlaybookStep(Contract):
    tool: str
    why: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    needs: list[str] = Field(
        default_factory=list, description="Context keys that must be set for the step to run."
    )
    needs_any: list[str] = Field(
        default_factory=list, description="At least one of these context keys must be set."
    )
    background: bool = Field(
        default=False,
        description="Runs alongside the steps after it; it gives them no context.",
    )


class Playbook(Contract):
    name: str
    symptom: str
    title: str
    summary: str
    steps: list[PlaybookStep]
    causes: list[str] = Field(description="Globs of cause IDs whose rules run, e.g. 'hang.*'.")
    fallback_cause: str | None = None
    next_steps: list[str] = Field(default_factory=list)
    body: str = ""
    path: str = ""


class PlaybookError(TriageError):
    pass


def parse_playbook(path: Path) -> Playbook:
    text = path.read_text(encoding="utf-8")
    parts = text.split("+++", 2)
    if not text.startswith("+++") or len(parts) < 3:
        raise PlaybookError(f"{path}: playbooks start with TOML front matter between '+++' lines")
    try:
        meta = tomllib.loads(parts[1])
        return Playbook(**meta, body=parts[2].strip(), path=str(path))
    except (tomllib.TOMLDecodeError, ValidationError, TypeError) as exc:
        raise PlaybookError(f"{path}: {str(exc).splitlines()[0]}") from exc


def load_playbooks(extra_dirs: list[Path] | None = None) -> dict[str, Playbook]:
    """Bundled playbooks, then the user's; a user playbook of the same name wins."""
    found: dict[str, Playbook] = {}
    for directory in [bundled_dir("playbooks"), *plugin_dirs(extra_dirs)]:
        for path in sorted(Path(directory).glob("*.md")):
            if not path.read_text(encoding="utf-8").startswith("+++"):
                continue  # a README beside the playbooks
            playbook = parse_playbook(path)
            found[playbook.name] = playbook
    return found


def get_playbook(name: str, extra_dirs: list[Path] | None = None) -> Playbook:
    playbooks = load_playbooks(extra_dirs)
    if name not in playbooks:
        raise PlaybookError(f"no playbook named {name!r} (have: {', '.join(sorted(playbooks))})")
    return playbooks[name]
