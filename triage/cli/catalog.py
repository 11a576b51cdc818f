"""What triage knows, listed: its tools (and running one by hand), its playbooks, its rules,
and the agent skill to install. Long listings page like git's on a terminal."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from triage.cli.common import PLUGIN_DIRS, UsageError, load
from triage.cli.help_format import TidyGroup

tools_app = typer.Typer(cls=TidyGroup, help="List and run evidence tools.", no_args_is_help=True)
playbooks_app = typer.Typer(cls=TidyGroup, help="List and read playbooks.", no_args_is_help=True)
rules_app = typer.Typer(
    cls=TidyGroup, help="List the rules and the cause IDs they emit.", no_args_is_help=True
)
skill_app = typer.Typer(cls=TidyGroup, help="Install the triage agent skill.", no_args_is_help=True)


def page(lines: list[str]) -> None:
    """Through a pager (`$PAGER`, else `less -FRX` as git runs it) when stdout is a
    terminal; printed as is when piped."""
    import pydoc  # 10-15 ms to import, for the listing commands alone

    os.environ.setdefault("LESS", "FRX")
    pydoc.pager("\n".join(lines) + "\n")


@tools_app.command("list")
def tools_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every registered tool with its description and input schema."""
    from triage.registry import REGISTRY

    load()
    specs = REGISTRY.all()
    if as_json:
        payload = [
            {
                "name": s.name,
                "description": s.description,
                "input_schema": s.input_schema(),
                "read_only": s.read_only,
            }
            for s in specs
        ]
        typer.echo(json.dumps(payload, indent=2))
        return
    lines = []
    for spec in specs:
        params = ", ".join(sorted(spec.parameter_names()))
        lines += [f"{spec.name}({params})", f"    {spec.description}"]
    page(lines)


@tools_app.command("run")
def tools_run(
    name: Annotated[str, typer.Argument(help="Tool name, see `triage tools list`.")],
    params: Annotated[
        list[str] | None,
        typer.Argument(metavar="KEY=VALUE", help="Tool inputs; values are JSON or text."),
    ] = None,
    params_json: Annotated[
        str | None, typer.Option("--params-json", help="All inputs as one JSON object.")
    ] = None,
) -> None:
    """Run one tool and print its result and evidence as JSON."""
    from triage.registry import REGISTRY

    load()
    arguments: dict[str, Any] = {}
    if params_json:
        try:
            arguments = json.loads(params_json)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--params-json is not valid JSON: {exc}") from exc
    for item in params or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise UsageError(f"tool inputs are KEY=VALUE, got {item!r}")
        try:
            arguments[key] = json.loads(raw)
        except json.JSONDecodeError:
            arguments[key] = raw
    if name not in REGISTRY:
        raise UsageError(f"unknown tool {name!r}; see `triage tools list`")
    run = REGISTRY.run(name, arguments)
    payload = {
        "result": run.result.model_dump(mode="json"),
        "evidence": [e.model_dump(mode="json") for e in run.evidence],
        "gaps": [g.model_dump(mode="json") for g in run.gaps],
    }
    typer.echo(json.dumps(payload, indent=2))
    if run.result.status.value == "error":
        typer.echo(f"triage: error: {run.result.error}", err=True)
        raise typer.Exit(1)


@playbooks_app.command("list")
def playbooks_list() -> None:
    """Every playbook: name, symptom and what it is for."""
    from triage.playbooks import load_playbooks

    for playbook in load_playbooks(PLUGIN_DIRS).values():
        typer.echo(f"{playbook.name:<14} {playbook.title}\n{'':<14} {playbook.summary}")


@playbooks_app.command("show")
def playbooks_show(name: str) -> None:
    """A playbook's steps, the tools it runs and the causes it looks for first."""
    from triage.playbooks import get_playbook

    playbook = get_playbook(name, PLUGIN_DIRS)
    lines = [f"# {playbook.title}", "", "Tools, in order:"]
    lines += [f"  - {step.tool}: {step.why}" for step in playbook.steps]
    lines += [
        f"Causes it looks for first: {', '.join(playbook.causes)} (every rule runs)",
        "",
        playbook.body,
    ]
    page(lines)


@rules_app.command("list")
def rules_list(
    cause: Annotated[
        str, typer.Option(metavar="GLOB", help="Only causes matching this glob, e.g. 'hang.*'.")
    ] = "*",
    brief: Annotated[bool, typer.Option("--brief", help="One line per rule.")] = False,
) -> None:
    """Each rule with the cause ID it emits and its documentation."""
    from triage.registry import DOC_SECTIONS, select
    from triage.taxonomy import CAUSES

    load()
    rules = select([cause])
    if not rules:
        raise UsageError(f"no rule emits a cause matching {cause!r}")
    lines = []
    for rule in rules:
        lines.append(f"{rule.cause_id}  [{rule.id}]  {rule.title}")
        if brief:
            continue
        lines.append(f"  cause: {CAUSES[rule.cause_id]}")
        for section in DOC_SECTIONS:
            body = rule.doc.get(section, "").replace("\n", "\n    ")
            lines += [f"  {section}:", f"    {body}"]
        lines.append("")
    page(lines)


@skill_app.command("install")
def skill_install(
    agent: Annotated[str, typer.Option(help="claude, codex, gemini, cursor or all.")] = "claude",
    project: Annotated[
        bool, typer.Option("--project", help="Into this project's agent folder.")
    ] = False,
    user: Annotated[
        bool, typer.Option("--user", help="Into your home agent folder (default).")
    ] = False,
    target: Annotated[
        Path | None, typer.Option(help="Install under this skills directory instead.")
    ] = None,
) -> None:
    """Install the triage skill (SKILL.md and what it references) for coding agents."""
    from triage.skill import install_skill, mcp_hint

    if project and user:
        raise UsageError("choose one of --project and --user")
    try:
        installed = install_skill(
            agent=agent, scope="project" if project else "user", target=target
        )
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from exc
    for path in installed:
        typer.echo(f"installed {path}")
    typer.echo(mcp_hint())
