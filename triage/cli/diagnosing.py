"""The diagnosing commands: `hang` (live ranks, a Slurm job, a debug server, the nodes'
collections) and `analyze` with the symptom commands over it (evidence on disk)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triage.cli.common import (
    PLUGIN_DIRS,
    Format,
    FormatOpt,
    JsonOpt,
    LlmOpt,
    ModelOpt,
    NoRedactOpt,
    PidsOpt,
    UsageError,
    emit,
    report_format,
)
from triage.llm import DEFAULT_MODEL
from triage.pid_args import split_pids
from triage.taxonomy import SYMPTOMS, canonical_symptom
from triage.whole_job_args import DebugServerOpt, SlurmJobOpt

if TYPE_CHECKING:
    from triage.models import Report


def note(message: str) -> None:
    typer.echo(f"triage: note: {message}", err=True)


def diagnose_or_fail(symptom: str | None, targets: dict[str, Any]) -> Report:
    """The engine's report; a plugin that does not load is a usage error."""
    from triage.engine import diagnose

    try:
        return diagnose(symptom, targets, PLUGIN_DIRS)
    except (ImportError, FileNotFoundError, ValueError, SyntaxError) as exc:
        raise UsageError(f"cannot load plugins: {exc}") from exc


def refine(report: Report, model: str) -> Report:
    """The `--llm` pass, with the playbook of the symptom the report names; on any failure
    the rules' report, with a note on stderr too."""
    from triage.llm import refine_report
    from triage.playbooks import UNKNOWN_SYMPTOM, select_playbook

    known = report.symptom != UNKNOWN_SYMPTOM
    playbook, _ = select_playbook(report.symptom if known else None, PLUGIN_DIRS)
    return refine_report(report, playbook, model, warn=lambda line: note(line))


def existing_paths(paths: list[str], what: str) -> list[str]:
    """The paths as given; one that names nothing is a typo, not evidence of silence."""
    for path in paths:
        if path != "-" and not os.path.exists(path):
            raise UsageError(f"{what}: no such file or folder: {path}")
    return paths


def _exit_without_evidence(report: Report) -> None:
    from triage.engine import found_evidence
    from triage.observations import LogFile

    if not found_evidence(report):
        gap = report.gaps[0] if report.gaps else None
        why = f"{gap.source}: {gap.reason}" if gap else "nothing could be read"
        read = any(e.kind == LogFile.EVIDENCE_KIND for e in report.evidence)
        what = "no failure found in what was read" if read else "no evidence could be gathered"
        typer.echo(f"triage: error: {what}: {why}", err=True)
        raise typer.Exit(1)


def hang(
    pid_args: Annotated[
        list[str] | None,
        typer.Argument(metavar="PID", help="More pids (more documents with --collections)."),
    ] = None,
    pids: PidsOpt = None,
    launcher_pid: Annotated[
        int | None,
        typer.Option(
            "--launcher-pid",
            metavar="PID",
            help="torchrun / mp.spawn parent pid (a rank's pid is followed to its launcher).",
        ),
    ] = None,
    as_json: JsonOpt = False,
    fmt: FormatOpt = Format.terminal,
    llm: LlmOpt = False,
    model: ModelOpt = DEFAULT_MODEL,
    timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds per py-spy dump.")
    ] = 10.0,
    flight_recorder: Annotated[
        list[str] | None,
        typer.Option(
            "--flight-recorder",
            metavar="PATH",
            help="Folder or files of Flight Recorder dumps (repeatable).",
        ),
    ] = None,
    logs: Annotated[
        list[str] | None,
        typer.Option(
            "--logs", metavar="PATH", help="Rank logs, NCCL debug files or folders to read too."
        ),
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
            metavar="PATH",
            help="`triage collect` documents of every node: files, folders, - for stdin.",
        ),
    ] = None,
    debug_server: DebugServerOpt = None,
    slurm_job: SlurmJobOpt = None,
    no_redact: NoRedactOpt = False,
) -> None:
    """Diagnose a hung job from its live rank processes (py-spy stacks of every rank), from
    every node of its Slurm job or its nodes' `triage collect` documents, or through its
    debug server, with its Flight Recorder dumps and logs."""
    from triage.cli.pid_targets import resolve_processes
    from triage.engine import job_targets
    from triage.pasted import Pasted

    fmt = report_format(as_json, fmt)
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
    existing_paths([*(flight_recorder or []), *(logs or []), *(collections or [])], "hang")
    processes = resolve_processes(all_pids, launcher_pid)
    for line in processes.notes:
        note(line)
    with Pasted(collections or []) as pasted:
        targets = job_targets(
            logs or [],
            processes.pids,
            processes.launcher_pid,
            flight_recorder or [],
            timeout,
            signal_probe,
            pasted.paths,
            debug_server,
            slurm_job,
        )
        report = diagnose_or_fail("hang", targets)
        if llm:
            report = refine(report, model)
        report = pasted.restore(report)
    emit(report, fmt, redact=not no_redact)
    _exit_without_evidence(report)


PathsArg = Annotated[
    list[str], typer.Argument(metavar="PATH", help="Log files, folders, or - for stdin.")
]


def _symptom(value: str | None) -> str | None:
    """`--symptom`'s check: each symptom by its one name or an earlier spelling."""
    if value is None:
        return None
    name = canonical_symptom(value)
    if name not in (*SYMPTOMS, "analyze"):
        raise UsageError(f"--symptom: unknown symptom {value!r} (one of: {', '.join(SYMPTOMS)})")
    return name


def analyze(
    paths: PathsArg,
    symptom: Annotated[
        str | None,
        typer.Option(
            metavar="|".join(SYMPTOMS),
            callback=_symptom,
            help="Fix the symptom; by default the evidence decides.",
        ),
    ] = None,
    pids: PidsOpt = None,
    as_json: JsonOpt = False,
    fmt: FormatOpt = Format.terminal,
    llm: LlmOpt = False,
    model: ModelOpt = DEFAULT_MODEL,
    no_redact: NoRedactOpt = False,
) -> None:
    """Name the cause from logs, tracebacks, NCCL output, launcher reports and dumps."""
    fmt = report_format(as_json, fmt)
    analyze_paths(paths, symptom, pids, fmt, model if llm else None, not no_redact)


def symptom_command(symptom: str, summary: str) -> Any:
    """`triage SYMPTOM PATH...`: `analyze` with the symptom fixed."""

    def command(
        paths: PathsArg,
        pids: PidsOpt = None,
        as_json: JsonOpt = False,
        fmt: FormatOpt = Format.terminal,
        llm: LlmOpt = False,
        model: ModelOpt = DEFAULT_MODEL,
        no_redact: NoRedactOpt = False,
    ) -> None:
        fmt = report_format(as_json, fmt)
        analyze_paths(paths, symptom, pids, fmt, model if llm else None, not no_redact)

    command.__doc__ = f"`analyze --symptom {symptom}`: {summary}"
    return command


def _pids_among_paths(paths: list[str], pids: list[str] | None) -> tuple[list[str], list[str]]:
    """`analyze logs/ --pids 11 12`: click gives `--pids` one value, and 12 lands among the
    paths; with --pids given, a number that names no file is a pid."""
    if not pids:
        return paths, []
    stray = [p for p in paths if p.isdigit() and not os.path.exists(p)]
    return [p for p in paths if p not in stray], stray


def analyze_paths(
    paths: list[str],
    symptom: str | None,
    pids: list[str] | None,
    fmt: Format,
    llm_model: str | None = None,
    redact: bool = True,
) -> None:
    from triage.engine import job_targets
    from triage.pasted import Pasted

    paths, stray = _pids_among_paths(paths, pids)
    all_pids = split_pids([*(pids or []), *stray])
    if not paths:
        raise UsageError("give the logs, dumps or folders to read (PATH..., - for stdin)")
    existing_paths(paths, "analyze")
    with Pasted(paths) as pasted:
        report = diagnose_or_fail(symptom, job_targets(pasted.paths, all_pids))
        if llm_model is not None:  # inside: the model's tools may read the pasted text
            report = refine(report, llm_model)
        report.targets["paths"] = paths
        report = pasted.restore(report)
    emit(report, fmt, redact)
    _exit_without_evidence(report)
