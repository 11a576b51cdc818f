"""Help that reads like a Unix tool's: `--pids PID,...`, `--timeout SECONDS`, flags without
a type, and usage lines such as `triage hang [OPTIONS] [PID...]`, where typer would print
`<list[str]>`, `<bool>` and `[[PID]...]...`."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

#: Plain names for the Python types options take.
_TYPE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "Path": "PATH"}


class TidyOption(TyperOption):
    """An option whose help shows its metavar, its choices or its plain type, never a
    Python annotation; a flag shows nothing."""

    def display_type_rich(self, ctx: typer.Context) -> str | None:  # type: ignore[override]
        if self.metavar is not None:
            return self.metavar
        if self.is_flag or self.count:
            return None
        desc = self.type_descriptor
        if desc.is_choice:
            return "|".join(str(getattr(c, "value", c)) for c in desc.choices or ())
        bare = self.bare_type().removeprefix("list[").removesuffix("]")
        return _TYPE_NAMES.get(bare, bare.upper())


class TidyArgument(TyperArgument):
    """An argument named once in help (its metavar), and in usage as `PATH...` when
    required, `[PID...]` when not."""

    def display_type_rich(self, ctx: typer.Context) -> str | None:  # type: ignore[override]
        return None

    def _usage_display_name(self) -> str:
        name = (self.metavar or self.name or "ARG").upper()
        if self.nargs != 1 and not name.endswith("..."):
            name += "..."
        return name if self.required else f"[{name}]"


def _tidy_params(params: list[Any]) -> list[Any]:
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = TidyOption
        elif type(param) is TyperArgument:
            param.__class__ = TidyArgument
            if param.nargs != 1 and param.metavar and not param.metavar.endswith("..."):
                param.metavar += "..."  # the arguments panel names it as the usage line does
    return params


class TidyCommand(TyperCommand):
    """A command whose parameters, the help option among them, have the tidy help."""

    def get_params(self, ctx: typer.Context) -> list[Any]:  # type: ignore[override]
        return _tidy_params(super().get_params(ctx))


class TidyGroup(TyperGroup):
    """A group (`triage`, `triage tools`, ...) whose commands have the tidy help."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for command in self.commands.values():
            if type(command) is TyperCommand:
                command.__class__ = TidyCommand

    def get_params(self, ctx: typer.Context) -> list[Any]:  # type: ignore[override]
        return _tidy_params(super().get_params(ctx))
