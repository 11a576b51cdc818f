"""The tool registry: evidence tools are plain typed functions registered by name.

The CLI, the engine, the LLM loop and the MCP server all reach tools only through
this registry, so a tool written once is callable everywhere with the same name,
description and input schema.
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from triage.models import Evidence, Gap, ToolResult, ToolStatus
from triage.text import bound_text


def validation_reason(exc: ValidationError) -> str:
    """Pydantic's errors as one line: `field.path: message; ...`."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())


class ToolError(Exception):
    """A tool could not gather its evidence; the message is the one-line reason."""

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


@dataclass
class ToolOutput:
    """What a tool returns: evidence, what it could not see, and facts for later steps."""

    evidence: list[Evidence] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    text: str = ""


@dataclass
class ToolSpec:
    """A registered tool. `read_only` is a promise that it never kills, signals or writes
    into the job (pausing a process for a stack dump is allowed): the LLM loop and the
    MCP server offer only such tools to a model."""

    name: str
    description: str
    func: Callable[..., ToolOutput]
    read_only: bool = True
    _model: type[BaseModel] | None = None

    @property
    def input_model(self) -> type[BaseModel]:
        """Built on first use: start-up time matters more than a few cached schemas."""
        if self._model is None:
            self._model = _input_model(self.name, self.func)
        return self._model

    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()

    def parameter_names(self) -> set[str]:
        return set(inspect.signature(self.func).parameters)


@dataclass
class ToolRun:
    """A finished call: the recorded result plus the evidence and gaps it produced."""

    result: ToolResult
    evidence: list[Evidence]
    gaps: list[Gap]
    context: dict[str, Any]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _input_model(name: str, func: Callable[..., Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    hints = inspect.get_annotations(func, eval_str=True)
    for param in inspect.signature(func).parameters.values():
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model_name = "".join(part.title() for part in name.split("_")) + "Input"
    return create_model(model_name, __base__=_Strict, **fields)


class Registry:
    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._deferred: dict[str, str] = {}
        self._broken: dict[str, str] = {}

    def defer(self, name: str, module: str) -> None:
        """Know a tool by name now; import the module that registers it on first use."""
        if name not in self._tools:
            self._deferred[name] = module

    def _resolve(self, name: str) -> None:
        module = self._deferred.pop(name, None)
        if module is None:
            return
        try:
            importlib.import_module(module)
        except Exception as exc:  # a broken tool module costs its tools, not the report
            self._broken[name] = f"{module} failed to import: {type(exc).__name__}: {exc}"

    def register(
        self,
        func: Callable[..., ToolOutput],
        name: str,
        description: str,
        read_only: bool = True,
    ) -> ToolSpec:
        if name in self._tools and self._tools[name].func is not func:
            raise ValueError(f"tool {name!r} is registered twice")
        spec = ToolSpec(name, description, func, read_only)
        self._tools[name] = spec
        return spec

    def get(self, name: str) -> ToolSpec:
        self._resolve(name)
        try:
            return self._tools[name]
        except KeyError:
            if name in self._broken:
                raise KeyError(f"tool {name!r} is unavailable: {self._broken[name]}") from None
            known = ", ".join(sorted(self._tools)) or "none"
            raise KeyError(f"unknown tool {name!r} (known: {known})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._tools or name in self._deferred or name in self._broken

    def all(self) -> list[ToolSpec]:
        for name in list(self._deferred):
            self._resolve(name)
        return sorted(self._tools.values(), key=lambda spec: spec.name)

    def run(self, name: str, params: dict[str, Any]) -> ToolRun:
        """Call a tool; every failure comes back as a result with status `error`."""
        started = time.perf_counter()
        try:
            spec = self.get(name)
            arguments = spec.input_model.model_validate(params)
            output = spec.func(**dict(arguments))
        except ToolError as exc:
            return _failed(name, params, started, exc.reason, exc.hint)
        except ValidationError as exc:
            return _failed(name, params, started, f"invalid input: {validation_reason(exc)}", None)
        except KeyError as exc:
            return _failed(name, params, started, str(exc.args[0]), "see `triage tools list`")
        except Exception as exc:  # a tool bug must not lose the rest of the report
            reason = f"internal error: {type(exc).__name__}: {exc}".splitlines()[0]
            return _failed(name, params, started, reason, "please report this as a triage bug")
        status = ToolStatus.ok if output.evidence else ToolStatus.no_data
        text = output.text or "\n".join(e.summary for e in output.evidence)
        result = ToolResult(
            tool=name,
            status=status,
            params=params,
            duration_s=round(time.perf_counter() - started, 4),
            output=bound_text(text),
            evidence_ids=[e.id for e in output.evidence],
        )
        return ToolRun(result, output.evidence, output.gaps, output.context)


def _failed(
    name: str, params: dict[str, Any], started: float, reason: str, hint: str | None
) -> ToolRun:
    result = ToolResult(
        tool=name,
        status=ToolStatus.error,
        params=params,
        duration_s=round(time.perf_counter() - started, 4),
        error=reason,
    )
    return ToolRun(result, [], [Gap(source=name, reason=reason, hint=hint, tool=name)], {})


REGISTRY = Registry()


def tool(
    name: str | None = None, description: str | None = None, read_only: bool = True
) -> Callable[[Callable[..., ToolOutput]], Callable[..., ToolOutput]]:
    """Register a function as a tool; its docstring's first paragraph describes it.

    Pass `read_only=False` for a tool that acts on the job (signals a rank, writes a
    file): models are never offered it.
    """

    def decorate(func: Callable[..., ToolOutput]) -> Callable[..., ToolOutput]:
        doc = inspect.getdoc(func) or ""
        summary = description or doc.split("\n\n", 1)[0].replace("\n", " ")
        REGISTRY.register(func, name or func.__name__, summary, read_only)
        return func

    return decorate
