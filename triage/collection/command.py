"""The `triage collect` command: options to a Selection, the document to stdout or a file.

Registered by triage/cli.py; like every command it imports the engine only when it runs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from triage.errors import TriageError
from triage.pid_args import split_pids

_SLURM_JOB = re.compile(r"^\d+(\.\d+)?$")
_MASTER = re.compile(r"^\S+:\d+$")


def collect(
    ctx: typer.Context,
    pid_args: Annotated[list[str] | None, typer.Argument(metavar="PID", help="More pids.")] = None,
    pids: Annotated[list[str] | None, typer.Option("--pids", help="Rank process ids.")] = None,
    launcher_pid: Annotated[
        int | None, typer.Option("--launcher-pid", help="torchrun / mp.spawn parent pid.")
    ] = None,
    slurm_job: Annotated[
        str | None,
        typer.Option(
            "--slurm-job",
            metavar="JOB[.STEP]",
            help="The tasks of this Slurm job (step) on this node.",
        ),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", help="Every rank here with this TORCHELASTIC_RUN_ID."),
    ] = None,
    master: Annotated[
        str | None,
        typer.Option(
            "--master", metavar="ADDR:PORT", help="Every rank here with this MASTER_ADDR:PORT."
        ),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option(
            "--node-name", help="This node's name (default: SLURMD_NODENAME, else the host)."
        ),
    ] = None,
    logs: Annotated[
        list[str] | None,
        typer.Option("--logs", help="Rank logs, NCCL debug files or folders to read too."),
    ] = None,
    flight_recorder: Annotated[
        list[str] | None,
        typer.Option("--flight-recorder", "--fr", help="Flight Recorder dumps (repeatable)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the document here.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per py-spy dump.")] = 10.0,
) -> None:
    """Collect this node's part of a job (stacks, environment, host facts, logs given) as
    one JSON document for `triage hang --collections`. Only reads: py-spy pauses each
    process for the moment of the dump."""
    from triage.collection.collector import collect as collect_node
    from triage.collection.document import Selection
    from triage.text import format_ranks

    selection = Selection(
        pids=list(dict.fromkeys(split_pids([*(pids or []), *(pid_args or [])]))),
        launcher_pid=launcher_pid,
        slurm_job=slurm_job,
        run_id=run_id,
        master=master,
    )
    ways = [bool(selection.pids), launcher_pid is not None, slurm_job, run_id, master]
    if sum(map(bool, ways)) > 1:
        raise TriageError(
            "choose one way to find the ranks: --pids, --launcher-pid, --slurm-job,"
            " --run-id or --master"
        )
    if not any(ways) and not (logs or flight_recorder):
        raise TriageError(
            "give the job's ranks (--pids, --launcher-pid, --slurm-job JOB[.STEP], --run-id ID"
            " or --master ADDR:PORT) or its files (--logs, --flight-recorder)"
        )
    if slurm_job and not _SLURM_JOB.match(slurm_job):
        raise TriageError(f"--slurm-job is JOBID or JOBID.STEP (digits), got {slurm_job!r}")
    if master and not _MASTER.match(master):
        raise TriageError(f"--master is ADDR:PORT, got {master!r}")
    paths = [*(flight_recorder or []), *(logs or [])]
    document, found = collect_node(selection, paths, node_name, timeout, ctx.obj)
    text = document.model_dump_json() + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise TriageError(f"cannot write {output}: {exc.strerror or exc}") from exc
        if found:
            ranks = f"ranks {format_ranks(document.ranks)}" if document.ranks else "no ranks"
            typer.echo(f"triage: {document.node}: {ranks} in {document.duration_s:g}s", err=True)
    if not found:
        why = document.gaps[0].reason if document.gaps else "nothing could be read"
        typer.echo(f"triage: error: nothing collected on {document.node}: {why}", err=True)
        raise typer.Exit(1)
