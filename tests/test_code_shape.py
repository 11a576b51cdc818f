"""The shape of the code, checked: a reader can trust the folder map in README.

No import cycles inside the package (lazy imports inside functions count too: a cycle is
a cycle in what a reader must hold in mind), no module over 600 lines, and no two modules
with the same name, except rule modules, whose family folder plus name is their rule ID.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "triage"
MAX_LINES = 600


def _sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(REPO / "tools").rglob("*.py")])


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "tools":
        parts.insert(0, "triage")  # how the bundled tools are imported
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, known: set[str]) -> set[str]:
    """The package modules a file imports, outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and _is_type_checking(block)
        for n in ast.walk(block)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import submodule` depends on the submodule, not the package
            subs = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [sub for sub in subs if sub in known] or [node.module]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != "triage":
                found.add(name)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycles() -> None:
    paths = {_module(p): p for p in _sources()}
    known = set(paths)
    graph = {name: _imports(path, known) - {name} for name, path in paths.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in _sources()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long


def test_no_two_modules_share_a_name() -> None:
    seen: dict[str, list[str]] = {}
    for path in _sources():
        rule_module = path.parent.parent == PACKAGE / "rules"
        if path.name == "__init__.py" or rule_module:
            continue
        seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert not {name: where for name, where in seen.items() if len(where) > 1}
