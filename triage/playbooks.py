"""Playbooks: what to gather for a symptom, in which order, and which rules decide.

A playbook is a Markdown file: TOML front matter between `+++` lines for the engine,
then the steps in prose for a person or an agent following it by hand.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from triage.errors import TriageError
from triage.models import Contract, Evidence
from triage.plugins import bundled_dir, plugin_dirs
from triage.taxonomy import canonical_symptom


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


class NextStep(Contract):
    """A next step for the person on call, left out when the evidence shows it was done.

    In the front matter a plain string is a step that always applies; a table adds the
    conditions, e.g. `{ text = "Capture Flight Recorder dumps ...", unless_evidence =
    ["fr_overview"] }`.
    """

    text: str
    unless_evidence: list[str] = Field(
        default_factory=list,
        description="Evidence kinds, e.g. 'fr_overview', or a kind and its format, e.g. "
        "'memory_dump:snapshot': the step is left out when any is present.",
    )
    unless_signals: list[str] = Field(
        default_factory=list,
        description="Log signature globs, e.g. 'hang.fingerprint*': the step is left out when "
        "a log line matched one.",
    )

    @model_validator(mode="before")
    @classmethod
    def _plain(cls, data: Any) -> Any:
        return {"text": data} if isinstance(data, str) else data

    def applies(self, evidence: Iterable[Evidence]) -> bool:
        """Whether the step is still worth doing given what was gathered."""
        for item in evidence:
            if item.kind in self.unless_evidence:
                return False
            if f"{item.kind}:{item.data.get('format')}" in self.unless_evidence:
                return False
            name = item.data.get("signature") if item.kind == "log_signal" else None
            if isinstance(name, str) and any(
                fnmatch.fnmatchcase(name, p) for p in self.unless_signals
            ):
                return False
        return True


class Playbook(Contract):
    name: str
    symptom: str
    title: str
    summary: str
    steps: list[PlaybookStep]
    causes: list[str] = Field(
        description="Globs of the cause IDs the symptom is about, e.g. 'hang.*': what its steps"
        " look for and an agent is told to weigh first. Every rule runs on the evidence"
        " whatever the symptom; these name the family whose unknown is the fallback."
    )
    fallback_cause: str | None = None
    next_steps: list[NextStep] = Field(default_factory=list)
    body: str = ""
    path: str = ""

    @field_validator("symptom")
    @classmethod
    def _one_name(cls, symptom: str) -> str:
        """A user's playbook written for `comm` serves `comm-error`."""
        return canonical_symptom(symptom)


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


#: The intake playbook, whose symptom is unknown: the evidence names it.
INTAKE = "analyze"
UNKNOWN_SYMPTOM = "unknown"


def symptom_playbooks(playbooks: dict[str, Playbook]) -> dict[str, Playbook]:
    """Each symptom's playbook, by symptom; the intake playbook is none of them."""
    return {p.symptom: p for p in playbooks.values() if p.name != INTAKE}


def select_playbook(
    symptom: str | None, plugin_dirs: list[Path] | None = None
) -> tuple[Playbook, dict[str, Playbook]]:
    """The playbook for `symptom` (None or "analyze": the intake playbook), and every
    symptom's playbook, from which the intake's verdict picks the next steps."""
    playbooks = load_playbooks(plugin_dirs)
    by_symptom = symptom_playbooks(playbooks)
    name = canonical_symptom(symptom) if symptom else INTAKE
    chosen = playbooks.get(INTAKE) if name == INTAKE else by_symptom.get(name)
    if chosen is None:
        known = ", ".join([INTAKE, *sorted(by_symptom)])
        raise PlaybookError(f"unknown symptom {symptom!r} (one of: {known})")
    return chosen, by_symptom


def run_playbook(
    hung: bool, plugin_dirs: list[Path] | None = None
) -> tuple[Playbook, dict[str, Playbook]]:
    """`triage run`'s playbook: its folder holds every kind of evidence, so the hang
    playbook's tools run first (live ranks), then whatever else the intake reads. On a hang
    every rule decides (a communication error can be what hung it); after an exit the
    intake's verdict names the symptom."""
    playbooks = load_playbooks(plugin_dirs)
    intake, hang = playbooks[INTAKE], playbooks["hang"]
    tools = {step.tool for step in hang.steps}
    steps = [*hang.steps, *(step for step in intake.steps if step.tool not in tools)]
    if hung:
        merged = hang.model_copy(update={"name": "run", "steps": steps, "causes": ["*"]})
    else:
        merged = intake.model_copy(update={"name": "run", "steps": steps})
    return merged, symptom_playbooks(playbooks)


def get_playbook(name: str, extra_dirs: list[Path] | None = None) -> Playbook:
    playbooks = load_playbooks(extra_dirs)
    found = playbooks.get(name) or playbooks.get(canonical_symptom(name))
    if found is None:
        raise PlaybookError(f"no playbook named {name!r} (have: {', '.join(sorted(playbooks))})")
    return found
