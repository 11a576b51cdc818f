"""Where tools, rules and playbooks come from: the bundled ones and the user's.

`tools/` and `playbooks/` sit at the top of a checkout and inside the `triage`
package of a wheel; `bundled_dir` finds either, so a checkout, an editable install
and a wheel behave the same. User plugin directories (`--plugins DIR` or
`TRIAGE_PLUGINS`, os.pathsep-separated) hold `*.py` modules that register tools or
rules, and `*.md` playbooks; they load through the same code as the bundled ones.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from triage.registry import REGISTRY

PLUGINS_ENV = "TRIAGE_PLUGINS"
_PACKAGE_DIR = Path(__file__).resolve().parent
_loaded: set[str] = set()


def bundled_dir(name: str) -> Path:
    """`tools`, `playbooks` or `SKILL.md` as shipped: inside the package, else the checkout."""
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"triage installation is incomplete: {name} not found")


def plugin_dirs(extra: list[Path] | None = None) -> list[Path]:
    dirs = [Path(p) for p in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if p]
    return dirs + list(extra or [])


def _package(directory: Path, package: str) -> None:
    """Make `directory` importable as `package` (with or without an __init__.py)."""
    if package in sys.modules:
        return
    init = directory / "__init__.py"
    spec: importlib.machinery.ModuleSpec | None
    if init.exists():
        spec = importlib.util.spec_from_file_location(
            package, init, submodule_search_locations=[str(directory)]
        )
    else:  # a plain folder of modules: a namespace-like package with no code of its own
        spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
        spec.submodule_search_locations = [str(directory)]
    if spec is None:
        raise ImportError(f"cannot load {directory} as a package")
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    if spec.loader is not None and init.exists():
        spec.loader.exec_module(module)


def _modules(directory: Path) -> list[Path]:
    return [p for p in sorted(directory.glob("*.py")) if not p.stem.startswith("_")]


def import_directory(directory: Path, package: str) -> list[str]:
    """Import every module of a directory as submodules of `package`; returns their names."""
    _package(directory, package)
    names = []
    for path in _modules(directory):
        name = f"{package}.{path.stem}"
        importlib.import_module(name)
        names.append(name)
    return names


_TOOL_NAME = re.compile(r"""@tool\(\s*name\s*=\s*["']([A-Za-z_]\w*)["']""")


def load_tools() -> None:
    """Make the bundled tools callable by name; a module is imported when one of its tools
    is first needed, so `triage hang` does not pay for parsers it never runs."""
    if "tools" in _loaded:
        return
    directory = bundled_dir("tools")
    _package(directory, "triage.tools")
    for path in _modules(directory):
        module = f"triage.tools.{path.stem}"
        names = _TOOL_NAME.findall(path.read_text(encoding="utf-8"))
        if not names:  # a tool named by its function: only importing it tells the name
            importlib.import_module(module)
        for name in names:
            REGISTRY.defer(name, module)
    _loaded.add("tools")


def rule_families(causes: Iterable[str]) -> set[str] | None:
    """The cause families a playbook's globs reach ('hang.*' -> hang); None when any glob
    spans families."""
    families = {glob.split(".", 1)[0] for glob in causes}
    return None if any(set(f) & set("*?[") for f in families) else families


_RULE_CAUSE = re.compile(r"""@rule\(\s*["'][\w.]+["']\s*,\s*["']([\w.]+)["']""")


def load_rules(families: set[str] | None = None, kinds: set[str] | None = None) -> None:
    """Register the bundled rules of some cause families (all when None, idempotent).

    Rules live in `rules/<source>/<name>.py` (rule ID `<source>.<name>`); the cause each
    registers is read from its `@rule(...)` line, so a playbook imports only the rules of
    the families its causes name. With the evidence `kinds` of a report, a source whose
    package declares the kinds it reads (`READS`) is imported only when one is there.
    """
    directory = _PACKAGE_DIR / "rules"
    for source in sorted(p for p in directory.iterdir() if (p / "__init__.py").exists()):
        if kinds is not None and not _reads_any(source.name, kinds):
            continue
        for path in _modules(source):
            causes = _causes_of(path)
            if families is None or any(c.split(".", 1)[0] in families for c in causes):
                importlib.import_module(f"triage.rules.{source.name}.{path.stem}")


@functools.cache
def _causes_of(path: Path) -> list[str]:
    """The causes a rule module registers, read once: the engine loads rules at every
    decision, a chat session at each of its turns."""
    return _RULE_CAUSE.findall(path.read_text(encoding="utf-8"))


def _reads_any(source: str, kinds: set[str]) -> bool:
    reads: frozenset[str] | None = getattr(
        importlib.import_module(f"triage.rules.{source}"), "READS", None
    )
    return reads is None or bool(reads & kinds)


def load_plugins(dirs: list[Path]) -> list[str]:
    """Import user plugin modules; each directory gets its own package namespace."""
    loaded = []
    for directory in dirs:
        directory = directory.resolve()
        if not directory.is_dir():
            raise FileNotFoundError(f"plugin directory not found: {directory}")
        key = str(directory)
        if key in _loaded:
            continue
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        loaded += import_directory(directory, f"triage_plugin_{digest}")
        _loaded.add(key)
    return loaded


def load_all(
    extra_plugin_dirs: list[Path] | None = None,
    families: set[str] | None = None,
    *,
    rules: bool = True,
) -> None:
    """Tools, the rules of `families` (all when None; none when not `rules`: the engine then
    imports them for the evidence it found) and the user's plugins."""
    load_tools()
    if rules:
        load_rules(families)
    load_plugins(plugin_dirs(extra_plugin_dirs))
