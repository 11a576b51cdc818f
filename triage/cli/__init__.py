"""The `triage` command: a thin shell over the engine.

Heavy modules are imported inside commands, so `triage hang` starts fast and never
imports torch or an LLM SDK. Reports go to stdout; diagnostics go to stderr.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from triage import __version__
from triage.cli.catalog import playbooks_app, rules_app, skill_app, tools_app
from triage.cli.common import PLUGIN_DIRS, fail
from triage.cli.diagnosing import analyze, hang, symptom_command
from triage.cli.help_format import TidyGroup
from triage.cli.running import chat, demo, mcp_command, run
from triage.collection.command import collect
from triage.errors import TriageError


def _new_app() -> typer.Typer:
    return typer.Typer(
        cls=TidyGroup,
        name="triage",
        help="Root-cause triage for hung, failing or diverging distributed PyTorch jobs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
        context_settings={"help_option_names": ["-h", "--help"]},
    )


def _version(asked: bool) -> None:
    if asked:
        typer.echo(f"triage {__version__}")
        raise typer.Exit()


def main_options(
    ctx: typer.Context,
    plugins: Annotated[
        list[Path] | None,
        typer.Option(
            "--plugins",
            metavar="DIR",
            help="Directory of extra tool/rule modules and playbooks (repeatable).",
        ),
    ] = None,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Root-cause triage for distributed PyTorch jobs: hangs, comm errors, OOM, wrong results."""
    PLUGIN_DIRS[:] = list(plugins or [])
    ctx.obj = PLUGIN_DIRS  # for commands defined outside this package (`collect`)


def _commands(app: typer.Typer) -> dict[str, Callable[[], object]]:
    """Each top-level name and how it joins `app`, in the order help lists them."""
    return {
        "hang": lambda: app.command()(hang),
        "collect": lambda: app.command()(collect),
        "analyze": lambda: app.command()(analyze),
        "comm-error": lambda: app.command("comm-error")(
            symptom_command("comm-error", "NCCL/gloo errors, rendezvous failures, broken peers.")
        ),
        "oom": lambda: app.command("oom")(
            symptom_command("oom", "CUDA and host out-of-memory, from messages and snapshots.")
        ),
        "wrong-results": lambda: app.command("wrong-results")(
            symptom_command("wrong-results", "diverging replicas, unused parameters, NaNs.")
        ),
        "chat": lambda: app.command()(chat),
        "demo": lambda: app.command()(demo),
        "run": lambda: app.command(context_settings={"allow_interspersed_args": False})(run),
        "mcp": lambda: app.command("mcp")(mcp_command),
        "tools": lambda: app.add_typer(tools_app, name="tools"),
        "playbooks": lambda: app.add_typer(playbooks_app, name="playbooks"),
        "rules": lambda: app.add_typer(rules_app, name="rules"),
        "skill": lambda: app.add_typer(skill_app, name="skill"),
    }


def build_app(only: str | None = None) -> typer.Typer:
    """The CLI; with `only`, the group holds that one command. Typer builds every
    command's options from its signature on each start (~30 ms for all of them, on a
    command whose dumps race the clock), and a command named first needs no other."""
    app = _new_app()
    app.callback()(main_options)
    commands = _commands(app)
    for name, register in commands.items():
        if only is None or name == only:
            register()
    return app


app = build_app()
#: The names `main` builds a one-command app for.
_NAMES = frozenset(_commands(app))


class Terminated(BaseException):
    """TERM or HUP: unwinds like Ctrl-C, so temporary files are removed on the way out
    (a BaseException: no `except Exception` that guards a rule or a tool swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(signum)


def main() -> None:
    """Entry point: user-facing failures are one line and a non-zero exit, never a traceback."""
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints as \udcff
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    for signum in (signal.SIGTERM, signal.SIGHUP):  # `triage run` sets its own: it forwards
        signal.signal(signum, _terminate)
    named = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        build_app(only=named if named in _NAMES else None)(prog_name="triage")
    except TriageError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Terminated as exc:
        fail(f"terminated ({exc})", 128 + exc.signum)
    except Exception as exc:  # the last line of defence: no traceback for users
        if os.environ.get("TRIAGE_DEBUG"):
            raise
        fail(f"internal error: {type(exc).__name__}: {exc} (set TRIAGE_DEBUG=1 for a traceback)", 1)
