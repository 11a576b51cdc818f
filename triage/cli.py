"""The `triage` command: a thin shell over the engine.

Heavy modules are imported inside commands, so `triage hang` starts fast and never
imports torch or an LLM SDK. Reports go to stdout; diagnostics go to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from triage.collection.command import collect
from triage.errors import TriageError
from triage.llm import DEFAULT_MODEL
from triage.pid_args import split_pids
from triage.whole_job_args import DebugServerOpt, DebugServerPortOpt, SlurmJobOpt

if TYPE_CHECKING:
    from triage.models import Report

app = typer.Typer(
    name="triage",
    help="Root-cause triage for hung, failing or diverging distributed PyTorch jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
tools_app = typer.Typer(help="List and run evidence tools.", no_args_is_help=True)
playbooks_app = typer.Typer(help="List and read playbooks.", no_args_is_help=True)
rules_app = typer.Typer(help="List the rules and the cause IDs they emit.", no_args_is_help=True)
skill_app = typer.Typer(help="Install the triage agent skill.", no_args_is_help=True)
app.add_typer(tools_app, name="tools")
app.add_typer(playbooks_app, name="playbooks")
app.add_typer(rules_app, name="rules")
app.add_typer(skill_app, name="skill")

_plugin_dirs: list[Path] = []


class UsageError(TriageError):
    """Bad command-line input."""


class Format(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    json = "json"


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"triage: error: {message}", err=True)
    sys.exit(code)


def _load(causes: list[str] | None = None) -> None:
    """Tools, plugins, and the rules a playbook's `causes` reach (all rules by default)."""
    from triage.plugins import load_all, rule_families

    try:
        load_all(_plugin_dirs, rule_families(causes) if causes is not None else None)
    except (ImportError, FileNotFoundError, ValueError, SyntaxError) as exc:
        raise UsageError(f"cannot load plugins: {exc}") from exc


def emit(report: Report, fmt: Format) -> None:
    """Print the report in the chosen format; JSON is exactly one document on stdout."""
    if fmt is Format.json:
        from triage.render import render_json

        sys.stdout.write(render_json(report) + "\n")
    elif fmt is Format.markdown:
        from triage.render.markdown import render_markdown

        sys.stdout.write(render_markdown(report))
    else:
        from rich.console import Console

        from triage.render.terminal import print_report

        print_report(report, Console(width=min(Console().width, 120)))


@app.callback()
def main_options(
    ctx: typer.Context,
    plugins: Annotated[
        list[Path] | None,
        typer.Option(
            "--plugins", help="Directory of extra tool/rule modules and playbooks (repeatable)."
        ),
    ] = None,
) -> None:
    """Root-cause triage for distributed PyTorch jobs: hangs, comm errors, OOM, wrong results."""
    _plugin_dirs[:] = list(plugins or [])
    ctx.obj = _plugin_dirs  # for commands defined outside this module (`collect`)


LlmOpt = Annotated[
    bool,
    typer.Option(
        "--llm",
        help="Let a model (Anthropic API, ANTHROPIC_API_KEY) review the rules' report and"
        " gather more evidence with read-only tools; the rules' report stands if it fails.",
    ),
]
ModelOpt = Annotated[str, typer.Option("--model", help="Anthropic model for --llm and chat.")]


def _diagnose(symptom: str | None, targets: dict[str, Any]) -> Report:
    """The engine's report; a plugin that does not load is a usage error."""
    from triage.engine import diagnose

    try:
        return diagnose(symptom, targets, _plugin_dirs)
    except (ImportError, FileNotFoundError, ValueError, SyntaxError) as exc:
        raise UsageError(f"cannot load plugins: {exc}") from exc


def _refine(report: Report, model: str) -> Report:
    """The `--llm` pass, with the playbook of the symptom the report names; on any failure
    the rules' report, with a note on stderr too."""
    from triage.llm import refine_report
    from triage.playbooks import UNKNOWN_SYMPTOM, select_playbook

    known = report.symptom != UNKNOWN_SYMPTOM
    playbook, _ = select_playbook(report.symptom if known else None, _plugin_dirs)
    return refine_report(
        report, playbook, model, warn=lambda note: typer.echo(f"triage: {note}", err=True)
    )


@app.command()
def hang(
    pid_args: Annotated[
        list[str] | None,
        typer.Argument(metavar="[PID]...", help="More pids (more documents with --collections)."),
    ] = None,
    pids: Annotated[list[str] | None, typer.Option("--pids", help="Rank process ids.")] = None,
    launcher_pid: Annotated[
        int | None, typer.Option("--launcher-pid", help="torchrun / mp.spawn parent pid.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    fmt: Annotated[Format, typer.Option("--format", help="Report format.")] = Format.terminal,
    llm: LlmOpt = False,
    model: ModelOpt = DEFAULT_MODEL,
    timeout: Annotated[float, typer.Option(help="Seconds per py-spy dump.")] = 10.0,
    flight_recorder: Annotated[
        list[str] | None,
        typer.Option(
            "--flight-recorder", help="Folder or files of Flight Recorder dumps (repeatable)."
        ),
    ] = None,
    logs: Annotated[
        list[str] | None,
        typer.Option("--logs", help="Rank logs, NCCL debug files or folders to read too."),
    ] = None,
    signal_probe: Annotated[
        bool,
        typer.Option(
            "--signal-probe",
            help="Ask ranks running triage.probe (only those) for an in-process snapshot"
            " with its signal (SIGUSR1).",
        ),
    ] = False,
    collections: Annotated[
        list[str] | None,
        typer.Option(
            "--collections",
            help="`triage collect` documents of every node: files, folders, - for stdin.",
        ),
    ] = None,
    debug_server: DebugServerOpt = None,
    slurm_job: SlurmJobOpt = None,
) -> None:
    """Diagnose a hung job from its live rank processes (py-spy stacks of every rank), from
    every node of its Slurm job or its nodes' `triage collect` documents, or through its
    debug server, with its Flight Recorder dumps and logs."""
    from triage.engine import found_evidence, job_targets
    from triage.pasted import Pasted

    if collections:  # `--collections nodes/*.json`: the names after the first are arguments
        collections, pid_args = collections + (pid_args or []), []
    all_pids = split_pids((pids or []) + (pid_args or []))
    if collections and (all_pids or launcher_pid is not None):
        raise UsageError("--collections replaces --pids: run `triage collect` on this node too")
    if not (all_pids or launcher_pid is not None or debug_server or slurm_job) and not (
        flight_recorder or logs or collections
    ):
        raise UsageError(
            "give the job's processes (--pids PID... or --launcher-pid PID), its Slurm job"
            " (--slurm-job JOBID), its debug server (--debug-server HOST:PORT), its nodes'"
            " collections (--collections DIR) or its evidence (--flight-recorder, --logs)"
        )
    with Pasted(collections or []) as pasted:
        targets = job_targets(
            logs or [],
            all_pids,
            launcher_pid,
            flight_recorder or [],
            timeout,
            signal_probe,
            pasted.paths,
            debug_server,
            slurm_job,
        )
        report = _diagnose("hang", targets)
        if llm:
            report = _refine(report, model)
        report = pasted.restore(report)
    emit(report, Format.json if as_json else fmt)
    if not found_evidence(report):
        gap = report.gaps[0] if report.gaps else None
        why = f": {gap.source}: {gap.reason}" if gap else " (see gaps)"
        typer.echo(f"triage: error: no evidence could be gathered{why}", err=True)
        raise typer.Exit(1)


app.command()(collect)


class Symptom(StrEnum):
    hang = "hang"
    comm = "comm"
    oom = "oom"
    wrong = "wrong"
    config = "config"


PathsArg = Annotated[
    list[str], typer.Argument(metavar="PATH...", help="Log files, folders, or - for stdin.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
FormatOpt = Annotated[Format, typer.Option("--format", help="Report format.")]
PidsOpt = Annotated[
    list[str] | None,
    typer.Option("--pids", help="Live rank pids whose environment to compare (optional)."),
]


@app.command()
def analyze(
    paths: PathsArg,
    symptom: Annotated[
        Symptom | None,
        typer.Option(help="Fix the symptom; by default the evidence decides."),
    ] = None,
    pids: PidsOpt = None,
    as_json: JsonOpt = False,
    fmt: FormatOpt = Format.terminal,
    llm: LlmOpt = False,
    model: ModelOpt = DEFAULT_MODEL,
) -> None:
    """Name the cause from logs, tracebacks, NCCL output, launcher reports and dumps."""
    _analyze(paths, symptom, pids, Format.json if as_json else fmt, model if llm else None)


def _fixed_symptom(name: str, symptom: Symptom, summary: str) -> None:
    """Register `triage NAME PATH...`: `analyze` with the symptom fixed."""

    def command(
        paths: PathsArg,
        pids: PidsOpt = None,
        as_json: JsonOpt = False,
        fmt: FormatOpt = Format.terminal,
        llm: LlmOpt = False,
        model: ModelOpt = DEFAULT_MODEL,
    ) -> None:
        _analyze(paths, symptom, pids, Format.json if as_json else fmt, model if llm else None)

    command.__doc__ = f"`analyze --symptom {symptom.value}`: {summary}"
    app.command(name)(command)


_fixed_symptom("comm-error", Symptom.comm, "NCCL/gloo errors, rendezvous failures, broken peers.")
_fixed_symptom("oom", Symptom.oom, "CUDA and host out-of-memory, from messages and snapshots.")
_fixed_symptom("wrong-results", Symptom.wrong, "diverging replicas, unused parameters, NaNs.")


def _analyze(
    paths: list[str],
    symptom: Symptom | None,
    pids: list[str] | None,
    fmt: Format,
    llm_model: str | None = None,
) -> None:
    from triage.engine import found_evidence, job_targets
    from triage.pasted import Pasted

    all_pids = split_pids(pids or [])
    with Pasted(paths) as pasted:
        report = _diagnose(symptom.value if symptom else None, job_targets(pasted.paths, all_pids))
        if llm_model is not None:  # inside: the model's tools may read the pasted text
            report = _refine(report, llm_model)
        report.targets["paths"] = paths
        report = pasted.restore(report)
    emit(report, fmt)
    if not found_evidence(report):
        gap = report.gaps[0] if report.gaps else None
        why = f"{gap.source}: {gap.reason}" if gap else "nothing could be read"
        typer.echo(f"triage: error: no evidence: {why}", err=True)
        raise typer.Exit(1)


@app.command()
def chat(
    evidence: Annotated[
        list[str] | None,
        typer.Option("--evidence", help="Logs, dumps or folders to start from (repeatable)."),
    ] = None,
    pids: Annotated[
        list[str] | None, typer.Option("--pids", help="The job's live rank pids.")
    ] = None,
    model: ModelOpt = DEFAULT_MODEL,
) -> None:
    """On-call assistant: starts from the rules' report, answers questions, runs tools.

    Reads commands and questions from stdin (/help lists the commands); /save writes the
    report and the transcript as markdown for the incident ticket. Without
    ANTHROPIC_API_KEY it is a guided shell over the tools and playbooks.
    """
    from triage.chat import run_chat

    _load()
    run_chat(evidence or [], split_pids(pids or []), model, _plugin_dirs)


@app.command()
def demo(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    scenario: Annotated[
        str, typer.Option(help="Built-in scenario to run.")
    ] = "mismatched_collective",
) -> None:
    """Launch a real 4-rank gloo job with a planted bug, wait until it hangs, triage it."""
    from triage.demo import run_demo
    from triage.scenarios import ScenarioError

    _load(["hang.*"])
    try:
        run_demo(scenario, lambda report: emit(report, Format.json if as_json else Format.terminal))
    except (ScenarioError, TimeoutError) as exc:
        raise UsageError(f"demo failed: {str(exc).splitlines()[0]}") from exc


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[
        list[str],
        typer.Argument(
            metavar="-- COMMAND...",
            help="The job's launch command: torchrun ..., python train.py, deepspeed ...",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for logs, dumps and the report (new or empty)."),
    ] = None,
    hang_after: Annotated[
        float,
        typer.Option(
            "--hang-after", help="Seconds every rank must wait in collectives to count as hung."
        ),
    ] = 300.0,
    debug_detail: Annotated[
        bool,
        typer.Option("--debug-detail", help="Also set TORCH_DISTRIBUTED_DEBUG=DETAIL."),
    ] = False,
    debug_server_port: DebugServerPortOpt = None,
    kill_on_hang: Annotated[
        bool, typer.Option("--kill-on-hang", help="Kill the job after triaging a hang.")
    ] = False,
    signal_probe: Annotated[
        bool,
        typer.Option(
            "--signal-probe/--no-signal-probe",
            help="On a hang, ask the ranks that imported triage.probe (only those) for a"
            " Flight Recorder dump and an in-process snapshot with its signal.",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Run a job with debug logging and Flight Recorder on; triage it if it fails or hangs.

    Exits with the job's exit code, or 3 when the job hung (it is left running unless
    --kill-on-hang). Everything is written to --out (default ./triage-run-<time>).
    """
    from triage.job.debug_env import RunError
    from triage.job.run import RunOptions, run_job

    _load()
    options = RunOptions(
        command=command,
        out=out,
        hang_after=hang_after,
        debug_detail=debug_detail,
        debug_server_port=debug_server_port,
        kill_on_hang=kill_on_hang,
        signal_probe=signal_probe,
        as_json=as_json,
        plugin_dirs=_plugin_dirs,
    )
    try:
        code = run_job(
            options, lambda report: emit(report, Format.json if as_json else Format.terminal)
        )
    except RunError as exc:
        fail(str(exc), exc.exit_code)
    raise typer.Exit(code)


@app.command("mcp")
def mcp_command() -> None:
    """Serve the read-only tools and `triage_report` to MCP clients over stdio.

    Register it with an agent, e.g. `claude mcp add triage -- triage mcp`.
    """
    import contextlib

    try:
        from triage.mcp_server import serve
    except ModuleNotFoundError as exc:
        if exc.name != "mcp" and not (exc.name or "").startswith("mcp."):
            raise
        fail("`triage mcp` needs the MCP SDK: pip install 'triage[mcp]'", 1)
    # stdout is the protocol's from here on: a plugin that prints on import must not break it.
    with contextlib.redirect_stdout(sys.stderr):
        _load()
    serve(_plugin_dirs)


@tools_app.command("list")
def tools_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every registered tool with its description and input schema."""
    from triage.registry import REGISTRY

    _load()
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
    for spec in specs:
        params = ", ".join(sorted(spec.parameter_names()))
        typer.echo(f"{spec.name}({params})\n    {spec.description}")


@tools_app.command("run")
def tools_run(
    name: Annotated[str, typer.Argument(help="Tool name, see `triage tools list`.")],
    params: Annotated[
        list[str] | None,
        typer.Argument(metavar="[KEY=VALUE]...", help="Tool inputs; values are JSON or text."),
    ] = None,
    params_json: Annotated[
        str | None, typer.Option("--params-json", help="All inputs as one JSON object.")
    ] = None,
) -> None:
    """Run one tool and print its result and evidence as JSON."""
    from triage.registry import REGISTRY

    _load()
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

    for playbook in load_playbooks(_plugin_dirs).values():
        typer.echo(f"{playbook.name:<14} {playbook.title}\n{'':<14} {playbook.summary}")


@playbooks_app.command("show")
def playbooks_show(name: str) -> None:
    """A playbook's steps, the tools it runs and the causes it decides between."""
    from triage.playbooks import get_playbook

    playbook = get_playbook(name, _plugin_dirs)
    typer.echo(f"# {playbook.title}\n")
    typer.echo("Tools, in order:")
    for step in playbook.steps:
        typer.echo(f"  - {step.tool}: {step.why}")
    typer.echo(f"Causes decided: {', '.join(playbook.causes)}\n")
    typer.echo(playbook.body)


@rules_app.command("list")
def rules_list(
    cause: Annotated[
        str, typer.Option(help="Only causes matching this glob, e.g. 'hang.*'.")
    ] = "*",
    brief: Annotated[bool, typer.Option("--brief", help="One line per rule.")] = False,
) -> None:
    """Each rule with the cause ID it emits and its documentation."""
    from triage.registry import DOC_SECTIONS, select
    from triage.taxonomy import CAUSES

    _load()
    rules = select([cause])
    for rule in rules:
        typer.echo(f"{rule.cause_id}  [{rule.id}]  {rule.title}")
        if brief:
            continue
        typer.echo(f"  cause: {CAUSES[rule.cause_id]}")
        for section in DOC_SECTIONS:
            body = rule.doc.get(section, "").replace("\n", "\n    ")
            typer.echo(f"  {section}:\n    {body}")
        typer.echo("")
    if not rules:
        raise UsageError(f"no rule emits a cause matching {cause!r}")


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


def main() -> None:
    """Entry point: user-facing failures are one line and a non-zero exit, never a traceback."""
    # pydantic scans every installed distribution for plugins on first use (~80 ms with
    # torch installed); the CLI uses none, and start-up time is what on-call waits for.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        app()
    except TriageError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Exception as exc:  # the last line of defence: no traceback for users
        if os.environ.get("TRIAGE_DEBUG"):
            raise
        fail(f"internal error: {type(exc).__name__}: {exc} (set TRIAGE_DEBUG=1 for a traceback)", 1)
