"""The commands around a job rather than its evidence: `run` (launch it with debugging
on, triage it when it fails or hangs), `demo`, the on-call `chat` and the `mcp` server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from triage.cli.common import (
    PLUGIN_DIRS,
    Format,
    JsonOpt,
    ModelOpt,
    NoRedactOpt,
    PidsOpt,
    UsageError,
    emit,
    fail,
    load,
)
from triage.llm import DEFAULT_MODEL
from triage.pid_args import split_pids
from triage.whole_job_args import DebugServerPortOpt


def chat(
    pid_args: Annotated[
        list[str] | None, typer.Argument(metavar="PID", help="More rank pids.")
    ] = None,
    evidence: Annotated[
        list[str] | None,
        typer.Option(
            "--evidence", metavar="PATH", help="Logs, dumps or folders to start from (repeatable)."
        ),
    ] = None,
    pids: PidsOpt = None,
    model: ModelOpt = DEFAULT_MODEL,
) -> None:
    """On-call assistant: starts from the rules' report, answers questions, runs tools.

    Reads commands and questions from stdin (/help lists the commands); /save writes the
    report and the transcript for the incident ticket. Without ANTHROPIC_API_KEY it is a
    guided shell over the tools and playbooks.
    """
    from triage.chat import run_chat

    load()
    run_chat(evidence or [], split_pids((pids or []) + (pid_args or [])), model, PLUGIN_DIRS)


def demo(
    as_json: JsonOpt = False,
    scenario: Annotated[
        str, typer.Option(metavar="NAME", help="Built-in scenario to run.")
    ] = "mismatched_collective",
) -> None:
    """Launch a real 4-rank gloo job with a planted bug, wait until it hangs, triage it."""
    from triage.demo import run_demo
    from triage.scenarios import ScenarioError

    load(["hang.*"])
    try:
        run_demo(scenario, lambda report: emit(report, Format.json if as_json else Format.terminal))
    except (ScenarioError, TimeoutError) as exc:
        raise UsageError(f"demo failed: {str(exc).splitlines()[0]}") from exc


def run(
    command: Annotated[
        list[str],
        typer.Argument(
            metavar="-- COMMAND",
            help="The job's launch command: torchrun ..., python train.py, deepspeed ...",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="DIR", help="Folder for logs, dumps and the report (new or empty)."
        ),
    ] = None,
    hang_after: Annotated[
        float,
        typer.Option(
            "--hang-after",
            metavar="SECONDS",
            help="Seconds every rank must wait in collectives to count as hung.",
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
            " Flight Recorder dump and an in-process snapshot with its signal (SIGUSR1).",
        ),
    ] = True,
    as_json: JsonOpt = False,
    no_redact: NoRedactOpt = False,
) -> None:
    """Run a job with debug logging and Flight Recorder on; triage it if it fails or hangs.

    Exits with the job's exit code, or 3 when the job hung (it is left running unless
    --kill-on-hang). Everything is written to --out (default: ./triage-run-DATE-TIME).
    """
    from triage.job.debug_env import RunError
    from triage.job.run import RunOptions, run_job

    load()
    options = RunOptions(
        command=command,
        out=out,
        hang_after=hang_after,
        debug_detail=debug_detail,
        debug_server_port=debug_server_port,
        kill_on_hang=kill_on_hang,
        signal_probe=signal_probe,
        as_json=as_json,
        redact=not no_redact,
        plugin_dirs=PLUGIN_DIRS,
    )
    try:
        code = run_job(
            options,
            lambda report: emit(report, Format.json if as_json else Format.terminal, redact=False),
        )
    except RunError as exc:
        fail(str(exc), exc.exit_code)
    raise typer.Exit(code)


def _has_mcp_sdk() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):
        return False


def mcp_command() -> None:
    """Serve the read-only tools and `triage_report` to MCP clients over stdio.

    Register it with an agent, e.g. `claude mcp add triage -- triage mcp`.
    """
    import contextlib

    try:
        from triage.mcp_server import serve
    except ModuleNotFoundError:
        if _has_mcp_sdk():  # a broken install is not a missing extra
            raise
        fail("`triage mcp` needs the MCP SDK: pip install 'triage[mcp]'", 1)

    # stdout is the protocol's from here on: a plugin that prints on import must not break it.
    with contextlib.redirect_stdout(sys.stderr):
        load()
    serve(PLUGIN_DIRS)
