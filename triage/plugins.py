"""Where tools, rules and playbooks come from: the bundled ones and the user's.

`tools/` and `playbooks/` sit at the top of a checkout and inside the `triage`
package of a wheel; `bundled_dir` finds either, so a checkout, an editable install
and a wheel behave the same. User plugin directories (`--plugins DIR` or
`TRIAGE_PLUGINS`, os.pathsep-separated) hold `*.py` modules that register tools or
rules, and `*.md` playbooks; they load through the same code as the bundled ones.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

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


def import_directory(directory: Path, package: str) -> list[str]:
    """Import every module of a directory as submodules of `package`; returns their names."""
    if package not in sys.modules:
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
    names = []
    for path in sorted(directory.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        name = f"{package}.{path.stem}"
        importlib.import_module(name)
        names.append(name)
    return names


def load_tools() -> None:
    """Register the bundled tools (idempotent)."""
    if "tools" not in _loaded:
        import_directory(bundled_dir("tools"), "triage.tools")
        _loaded.add("tools")


def load_rules() -> None:
    """Register the bundled rules (idempotent)."""
    if "rules" not in _loaded:
        import_directory(_PACKAGE_DIR / "rules", "triage.rules")
        _loaded.add("rules")


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


def load_all(extra_plugin_dirs: list[Path] | None = None) -> None:
    load_tools()
    load_rules()
    load_plugins(plugin_dirs(extra_plugin_dirs))
