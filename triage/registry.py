"""The registry: evidence tools and rules, each a plain function registered by name.

The CLI, the engine, the LLM loop and the MCP server reach tools and rules only through
here, so a tool written once is callable everywhere with the same name, description and
input schema, and a rule is documented by its own docstring (`triage rules list`).
"""

from __future__ import annotations

import fnmatch
import functools
import gc
import importlib
import inspect
import os
import re
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, TypeVar, Union, cast, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, create_model, model_validator

from triage.models import Evidence, Finding, Gap, ToolResult, ToolStatus
from triage.observations.payload import Payload
from triage.taxonomy import is_cause
from triage.text import bound_text

PATH_SUFFIXES = ("_files", "_file", "_dir", "_path", "_paths")


def is_path_param(name: str) -> bool:
    """Inputs that name files or folders, by the registry's naming convention."""
    return name in ("paths", "collections") or name.endswith(PATH_SUFFIXES)


def path_values(value: Any) -> list[str]:
    """The paths an input holds: one, or a list of them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def not_a_file(params: dict[str, Any]) -> str | None:
    """Why a path input cannot be read: a FIFO, a device or a socket blocks or never ends
    (`/dev/zero`, NCCL's dump pipe). Files and folders pass; a missing path is the tool's
    to explain."""
    for name, value in params.items():
        if not is_path_param(name):
            continue
        for path in path_values(value):
            try:
                mode = os.stat(path).st_mode
            except (OSError, ValueError):
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return f"{path} is not a regular file (a FIFO, a device or a socket): not read"
    return None


def validation_reason(exc: ValidationError) -> str:
    """Pydantic's errors as one line: `field.path: message; ...`."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())


@contextmanager
def collector_paused() -> Iterator[None]:
    """Build evidence in bulk with Python's cycle collector off: evidence is trees of dicts,
    lists and models, never cycles, and the collector's full passes over the thousands of
    items piling up (4,096 ranks' stacks) cost more than building them. Also a decorator."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class ToolError(Exception):
    """A tool could not gather its evidence; the message is the one-line reason."""

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


@dataclass
class ToolOutput:
    """What a tool returns: evidence, what it could not see, facts for later steps, and
    notes for the report (what a tool that acts on the job did to it)."""

    evidence: list[Evidence] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    notes: list[str] = field(default_factory=list)


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
    notes: list[str] = field(default_factory=list)


def _wants_list(annotation: Any) -> bool:
    """`list[int]`, `list[str] | None`: a field that takes a list."""
    if get_origin(annotation) is list:
        return True
    return get_origin(annotation) in (Union, UnionType) and any(
        get_origin(arg) is list for arg in get_args(annotation)
    )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _one_value_as_a_list(cls, data: Any) -> Any:
        """`pids=10952` means `pids=[10952]`: people (`tools run`, chat) and models give one
        value where a list is expected."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            key: [value]
            if key in fields
            and _wants_list(fields[key].annotation)
            and not isinstance(value, list | tuple | type(None))
            else value
            for key, value in data.items()
        }


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
        # One import at a time: a second caller must wait for the tool, not miss it.
        self._resolving = threading.RLock()

    def defer(self, name: str, module: str) -> None:
        """Know a tool by name now; import the module that registers it on first use."""
        if name not in self._tools:
            self._deferred[name] = module

    def _resolve(self, name: str) -> None:
        if name not in self._deferred:
            return
        with self._resolving:
            module = self._deferred.get(name)
            if module is None:  # another thread imported it meanwhile
                return
            try:
                importlib.import_module(module)
            except Exception as exc:  # a broken tool module costs its tools, not the report
                self._broken[name] = f"{module} failed to import: {type(exc).__name__}: {exc}"
            finally:
                self._deferred.pop(name, None)

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

    def run(self, name: str, params: dict[str, Any], deadline_s: float | None = None) -> ToolRun:
        """Call a tool; every failure comes back as a result with status `error`. With a
        deadline, a call still running then is abandoned (its thread is a daemon: it blocks
        nothing, not even the exit) and comes back as an error."""
        if deadline_s is None:
            return self._call(name, params)
        started = time.perf_counter()
        done: list[ToolRun] = []
        worker = threading.Thread(
            target=lambda: done.append(self._call(name, params)),
            name=f"triage-tool-{name}",
            daemon=True,
        )
        worker.start()
        worker.join(deadline_s)
        if done:
            return done[0]
        reason = f"did not finish in {deadline_s:g} s"
        hint = "an input that never ends (a pipe, a device) or a process that does not answer"
        return _failed(name, params, started, reason, hint)

    def _call(self, name: str, params: dict[str, Any]) -> ToolRun:
        started = time.perf_counter()
        refused = not_a_file(params)
        if refused is not None:
            return _failed(name, params, started, refused, "give regular files or folders")
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
        return ToolRun(result, output.evidence, output.gaps, output.context, output.notes)


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


# --- rules ------------------------------------------------------------------------------

DOC_SECTIONS = (
    "What it detects",
    "Why it happens",
    "Evidence",
    "Fix",
    "Known false positives",
    "References",
)

P = TypeVar("P", bound=Payload)
T = TypeVar("T")


class EvidenceSet:
    """All evidence of one triage, with typed access to the payloads rules read."""

    def __init__(self, items: Iterable[Evidence]) -> None:
        self.items = list(items)
        self._memo: dict[object, Any] = {}
        self._kinds: dict[str, list[Evidence]] | None = None

    def of_kind(self, kind: str) -> list[Evidence]:
        """Indexed on the first call: rules ask for a dozen kinds of 12,000 items."""
        if self._kinds is None:
            self._kinds = {}
            for item in self.items:
                self._kinds.setdefault(item.kind, []).append(item)
        return list(self._kinds.get(kind, ()))

    def payloads(self, model: type[P]) -> list[tuple[Evidence, P]]:
        """The evidence of the model's kind with its payload, parsed once per item: every
        rule reads the same thousands of stacks, and the renderers' sets hold the items
        the engine's set parsed."""
        kind = model.EVIDENCE_KIND

        def parse() -> list[tuple[Evidence, P]]:
            with collector_paused():
                return [(e, _payload(e, model)) for e in self.of_kind(kind)]

        return self.derived((kind, model), parse)

    def derived(self, key: object, compute: Callable[[], T]) -> T:
        """A view computed once from this evidence and shared by the rules that need it."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])


class _Parsed(weakref.ref[Evidence]):
    """One item's payloads by model, for as long as the item lives (an item's data is never
    changed once a tool returned it)."""

    __slots__ = ("key", "payloads")
    key: int
    payloads: dict[type[Payload], Payload]

    def __new__(cls, item: Evidence) -> _Parsed:
        parsed = super().__new__(cls, item, _forget)
        parsed.key, parsed.payloads = id(item), {}
        return parsed


_PARSED: dict[int, _Parsed] = {}


def _forget(parsed: weakref.ref[Evidence]) -> None:
    _PARSED.pop(cast(_Parsed, parsed).key, None)


def _payload(item: Evidence, model: type[P]) -> P:
    parsed = _PARSED.get(id(item))
    if parsed is None or parsed() is not item:
        parsed = _PARSED[id(item)] = _Parsed(item)
    if model not in parsed.payloads:
        parsed.payloads[model] = model.model_validate(item.data)
    return cast(P, parsed.payloads[model])


Detector = Callable[[EvidenceSet], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    cause_id: str
    detect: Detector
    doc: dict[str, str]
    original: Detector
    #: Its findings stand only where no other rule found anything (`engine.rank`).
    last_resort: bool = False
    #: It reads text that shows no failure (metrics, where a log stops): its findings are
    #: readings to weigh, and the run still found no failure (`engine.found_evidence`).
    without_failure: bool = False

    @property
    def title(self) -> str:
        return self.doc.get("title", self.id)


RULES: dict[str, Rule] = {}


def parse_doc(text: str) -> dict[str, str]:
    """Split a rule docstring into its title line and its named sections."""
    lines = inspect.cleandoc(text).splitlines()
    doc = {"title": lines[0].strip() if lines else ""}
    current = None
    pattern = re.compile(rf"^({'|'.join(map(re.escape, DOC_SECTIONS))}):\s*$")
    for line in lines[1:]:
        match = pattern.match(line.strip())
        if match:
            current = match.group(1)
            doc[current] = ""
        elif current:
            doc[current] = (doc[current] + "\n" + line.strip()).strip()
    return doc


def rule(
    rule_id: str, cause_id: str, *, last_resort: bool = False, without_failure: bool = False
) -> Callable[[Detector], Detector]:
    """Register a detector; its docstring must hold every section of DOC_SECTIONS.

    The registered detector stamps `rule_id` and `cause_id` on every finding it yields,
    so a rule names them once, here. A `last_resort` rule's findings give way to any other
    rule's: it says which kind of failure the text shows when nothing names its cause. A
    `without_failure` rule reads text that shows none (implies `last_resort`).
    """

    def decorate(detect: Detector) -> Detector:
        if not is_cause(cause_id):
            raise ValueError(f"rule {rule_id}: unknown cause ID {cause_id!r}")
        doc = parse_doc(detect.__doc__ or "")
        missing = [s for s in DOC_SECTIONS if s not in doc]
        if missing:
            raise ValueError(f"rule {rule_id}: doc lacks sections {missing}")
        if rule_id in RULES and RULES[rule_id].original is not detect:
            raise ValueError(f"rule {rule_id} is registered twice")

        @functools.wraps(detect)
        def stamped(evidence: EvidenceSet) -> Iterator[Finding]:
            for finding in detect(evidence):
                finding.rule_id, finding.cause_id = rule_id, cause_id
                yield finding

        RULES[rule_id] = Rule(
            rule_id,
            cause_id,
            stamped,
            doc,
            detect,
            last_resort or without_failure,
            without_failure,
        )
        return detect

    return decorate


def select(patterns: Iterable[str]) -> list[Rule]:
    """Rules whose cause ID matches any glob, e.g. `hang.*`."""
    patterns = list(patterns)
    return [
        r
        for r in sorted(RULES.values(), key=lambda r: r.id)
        if any(fnmatch.fnmatchcase(r.cause_id, p) for p in patterns)
    ]


def run_rules(rules: Iterable[Rule], evidence: EvidenceSet) -> Iterator[tuple[Rule, Finding]]:
    for r in rules:
        for finding in r.detect(evidence):
            yield r, finding
