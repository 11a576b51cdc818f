"""The command-line options that reach a whole job (PyTorch's debug server, a Slurm job),
checked before anything runs: a typo in an address, a port or a job id is a usage error,
not a report of a server or a job that does not answer."""

from __future__ import annotations

from typing import Annotated

import typer

from triage.errors import TriageError


def debug_server_arg(value: str | None) -> str | None:
    """`--debug-server HOST:PORT`'s check (the reader's parser, imported only when used)."""
    if value is None:
        return None
    from triage.readers.debug_server import parse_address

    try:
        parse_address(value)
    except ValueError as exc:
        raise TriageError(f"--debug-server: {exc}") from None
    return value


def slurm_job_arg(value: str | None) -> str | None:
    """`--slurm-job JOBID[.STEP]`'s check (the collector, imported only when used)."""
    if value is None:
        return None
    from triage.collection.slurm import JOB_SPEC

    if not JOB_SPEC.match(value):
        raise TriageError(f"--slurm-job: expected JOBID or JOBID.STEP (digits), got {value!r}")
    return value


def port_arg(value: int | None) -> int | None:
    """`--debug-server-port PORT`'s check."""
    if value is not None and not 0 < value < 65536:
        raise TriageError(f"--debug-server-port: expected a port (1-65535), got {value}")
    return value


DebugServerOpt = Annotated[
    str | None,
    typer.Option(
        "--debug-server",
        metavar="HOST:PORT",
        callback=debug_server_arg,
        help="PyTorch's debug server (rank 0's host, start_debug_server's port): every rank's"
        " stacks and Flight Recorder, --timeout seconds per request.",
    ),
]
DebugServerPortOpt = Annotated[
    int | None,
    typer.Option(
        "--debug-server-port",
        metavar="PORT",
        callback=port_arg,
        help="Start PyTorch's debug server on this port in every rank that imports"
        " triage.probe (trusted networks only); read it with triage hang --debug-server.",
    ),
]
SlurmJobOpt = Annotated[
    str | None,
    typer.Option(
        "--slurm-job",
        metavar="JOBID[.STEP]",
        callback=slurm_job_arg,
        help="A running Slurm job: `srun --overlap` runs `triage collect` on each of its"
        " nodes at once (TRIAGE_COLLECTOR: the command nodes run instead of this Python's"
        " `-m triage`).",
    ),
]
