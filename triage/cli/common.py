"""What every command shares: the usage error, the report formats, the user's plugins and
the options several commands take with the same meaning."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TextIO, cast

import typer

from triage.errors import TriageError
from triage.printable import PrintableStream, plain_text

if TYPE_CHECKING:
    from triage.models import Report

#: `--plugins` of this invocation, set by the top-level callback before any command runs.
PLUGIN_DIRS: list[Path] = []


class UsageError(TriageError):
    """Bad command-line input: one line on stderr and exit 2, no report."""


class Format(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    json = "json"
    html = "html"


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"triage: error: {message}", err=True)
    sys.exit(code)


def load(causes: list[str] | None = None) -> None:
    """Tools, plugins, and the rules a playbook's `causes` reach (all rules by default)."""
    from triage.plugins import load_all, rule_families

    try:
        load_all(PLUGIN_DIRS, rule_families(causes) if causes is not None else None)
    except (ImportError, FileNotFoundError, ValueError, SyntaxError) as exc:
        raise UsageError(f"cannot load plugins: {exc}") from exc


def report_format(as_json: bool, fmt: Format) -> Format:
    """`--json` is `--format json`; asking for two formats at once is a usage error."""
    if as_json and fmt not in (Format.terminal, Format.json):
        raise UsageError(f"--json and --format {fmt.value} ask for two formats: choose one")
    return Format.json if as_json else fmt


def emit(report: Report, fmt: Format, redact: bool = True) -> None:
    """Print the report in the chosen format, secrets masked unless `redact` is off; JSON
    is exactly one document on stdout."""
    if redact:
        from triage.redacted import redacted

        report = redacted(report)
    if fmt is Format.json:
        from triage.render import render_json

        sys.stdout.write(render_json(report) + "\n")
    elif fmt is Format.markdown:
        from triage.render.markdown import render_markdown

        sys.stdout.write(plain_text(render_markdown(report)))
    elif fmt is Format.html:
        from triage.render.html import render_html

        sys.stdout.write(plain_text(render_html(report)))
    else:
        from rich.console import Console

        from triage.render.terminal import print_report

        width = min(Console().width, 120)
        stream = cast(TextIO, PrintableStream(sys.stdout))  # a stream by its methods
        print_report(report, Console(file=stream, width=width))


LlmOpt = Annotated[
    bool,
    typer.Option(
        "--llm",
        help="Let a model (Anthropic API, ANTHROPIC_API_KEY) review the rules' report and"
        " gather more evidence with read-only tools; the rules' report stands if it fails.",
    ),
]
ModelOpt = Annotated[
    str, typer.Option("--model", metavar="MODEL", help="Anthropic model for --llm and chat.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
FormatOpt = Annotated[
    Format,
    typer.Option(
        "--format",
        metavar="FORMAT",
        help="terminal, markdown, json, or html (one self-contained page to attach).",
    ),
]
NoRedactOpt = Annotated[
    bool,
    typer.Option(
        "--no-redact",
        help="Show secrets (tokens, passwords, keys) the evidence holds: for local debugging"
        " only, never for a ticket.",
    ),
]
PidsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--pids",
        metavar="PID,...",
        help="Rank process ids: `--pids 1 2`, `--pids 1,2` or repeated.",
    ),
]
