"""Packaging: tools/, playbooks/ and SKILL.md are found the same way from a checkout,
a plugin directory, an installed wheel and an editable install, and nothing installs a
top-level `tools` package.

The slow tests build the wheel offline (`pip wheel --no-build-isolation`, so hatchling
must be installed beside pytest) and install it into a throw-away venv whose only other
contents are links to triage's runtime dependencies: the checkout is not importable there.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

import triage
from triage.plugins import bundled_dir

from .conftest import REPO, triage_cli

BUNDLED_IN_WHEEL = [
    "triage/tools/__init__.py",
    "triage/tools/dump_stacks.py",
    "triage/tools/discover_ranks.py",
    "triage/playbooks/hang.md",
    "triage/SKILL.md",
    "triage/rules/__init__.py",
    "triage/rules/stacks/mismatched_collective.py",
    "triage/job/probe_protocol.py",
]
CLEAN_ENV_DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "TRIAGE_PLUGINS")

# --- a plugin directory, as a user writes one ---------------------------------------------

PLUGIN_TOOL = "packaging_probe"
PLUGIN_PLAYBOOK = "packaging_probe_pb"
PLUGIN_MODULE = f'''
"""A user plugin: one tool, registered through the public registry API."""

from triage.registry import ToolOutput, tool


@tool()
def {PLUGIN_TOOL}(message: str = "hello") -> ToolOutput:
    """Echo a message: a plugin tool used by the packaging tests."""
    return ToolOutput(text=message)
'''
PLUGIN_PLAYBOOK_MD = f'''+++
name = "{PLUGIN_PLAYBOOK}"
symptom = "hang"
title = "Probe: a plugin playbook"
summary = "Proves that playbooks in a plugin directory are listed."
causes = ["hang.*"]
fallback_cause = "hang.unknown"

[[steps]]
tool = "{PLUGIN_TOOL}"
why = "Say hello."
+++

# Probe playbook

Nothing to do.
'''


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV_DROP}
    env.update(extra)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _listed_tools(out: str) -> set[str]:
    return set(re.findall(r"^(\w+)\(", out, flags=re.M))


def _listed_playbooks(out: str) -> set[str]:
    return set(re.findall(r"^(\S+) ", out, flags=re.M))


# --- fast: the checkout --------------------------------------------------------------------


def test_bundled_dirs_resolve_in_checkout() -> None:
    tools, playbooks, skill = (
        bundled_dir("tools"),
        bundled_dir("playbooks"),
        bundled_dir("SKILL.md"),
    )
    assert (tools / "dump_stacks.py").is_file() and (tools / "discover_ranks.py").is_file()
    assert (playbooks / "hang.md").is_file()
    assert skill.is_file() and skill.name == "SKILL.md"
    if Path(triage.__file__).resolve().parent == REPO / "triage":
        # Run from the checkout (or an editable install): the top-level folders are used.
        assert (tools, playbooks, skill) == (REPO / "tools", REPO / "playbooks", REPO / "SKILL.md")
    with pytest.raises(FileNotFoundError):
        bundled_dir("no-such-thing")


@pytest.fixture(
    params=[
        pytest.param(True, id="package"),
        pytest.param(False, id="bare"),
    ]
)
def plugin_dirs(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path]:
    """A tool plugin directory and a playbook plugin directory, with or without __init__.py."""
    tools_dir, playbooks_dir = tmp_path / "plugin_tools", tmp_path / "plugin_playbooks"
    tools_dir.mkdir()
    playbooks_dir.mkdir()
    if request.param:
        (tools_dir / "__init__.py").write_text("", encoding="utf-8")
        (playbooks_dir / "__init__.py").write_text("", encoding="utf-8")
    (tools_dir / "probe_tool.py").write_text(PLUGIN_MODULE, encoding="utf-8")
    (playbooks_dir / "probe.md").write_text(PLUGIN_PLAYBOOK_MD, encoding="utf-8")
    (playbooks_dir / "README.md").write_text("# not a playbook\n", encoding="utf-8")
    return tools_dir, playbooks_dir


def _checkout_env(**extra: str) -> dict[str, str]:
    return _clean_env(PYTHONPATH=str(REPO), **extra)


def test_plugin_dir_via_flag(plugin_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    tools_dir, playbooks_dir = plugin_dirs
    flags = ["--plugins", str(tools_dir), "--plugins", str(playbooks_dir)]
    env = _checkout_env()
    tools = _listed_tools(_run(triage_cli(*flags, "tools", "list"), tmp_path, env))
    assert {PLUGIN_TOOL, "dump_stacks", "discover_ranks"} <= tools
    playbooks = _listed_playbooks(_run(triage_cli(*flags, "playbooks", "list"), tmp_path, env))
    assert {PLUGIN_PLAYBOOK, "hang"} <= playbooks
    ran = _run(triage_cli(*flags, "tools", "run", PLUGIN_TOOL, "message=hi"), tmp_path, env)
    assert '"status": "no_data"' in ran and '"output": "hi"' in ran


def test_plugin_dir_via_env(plugin_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    env = _checkout_env(TRIAGE_PLUGINS=os.pathsep.join(map(str, plugin_dirs)))
    tools = _listed_tools(_run(triage_cli("tools", "list"), tmp_path, env))
    assert {PLUGIN_TOOL, "dump_stacks", "discover_ranks"} <= tools
    playbooks = _listed_playbooks(_run(triage_cli("playbooks", "list"), tmp_path, env))
    assert {PLUGIN_PLAYBOOK, "hang"} <= playbooks


# --- slow: the wheel and a fresh venv -------------------------------------------------------


def _require_hatchling() -> None:
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("offline wheel builds need hatchling installed beside pytest (dev extra)")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require_hatchling()
    out = tmp_path_factory.mktemp("wheel")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--disable-pip-version-check",
        "-q",
        "--wheel-dir",
        str(out),
        str(REPO),
    ]
    _run(cmd, out, _clean_env(), timeout=120)
    (built,) = out.glob("triage-*.whl")
    return built


def _requirement_closure(requirements: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions that `requirements` need, transitively (no extras)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(requirements)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in found:
            continue
        found[name] = importlib.metadata.distribution(name)
        todo += found[name].requires or []
    return list(found.values())


def _link_dependencies(requirements: Iterable[str], into: Path) -> None:
    """Symlink the import packages (and metadata) of the requirements' distributions into
    `into`: the test venv sees the dependencies, never the project venv's other contents
    (the checkout's editable hook, stale copies, a top-level `tools`)."""
    into.mkdir()
    for dist in _requirement_closure(requirements):
        assert dist.metadata["Name"] != "triage"
        root = Path(str(dist.locate_file(""))).resolve()
        for top in sorted({f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}):
            if top.endswith(".pth") or top == "__pycache__" or (into / top).exists():
                continue
            assert top not in ("tools", "triage"), f"{dist.metadata['Name']} installs {top}"
            if (root / top).exists():
                (into / top).symlink_to(root / top)


def _make_venv(tmp: Path, whl: Path, requirements: Iterable[str]) -> Path:
    """A venv holding `whl` plus links to its dependencies; returns its site-packages."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        "--disable-pip-version-check",
        "-q",
        str(whl),
    ]
    _run(cmd, tmp, _clean_env(), timeout=120)
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            tmp,
            _clean_env(),
        ).strip()
    )
    _link_dependencies(requirements, tmp / "deps")
    (site / "zz_triage_test_deps.pth").write_text(f"{tmp / 'deps'}\n", encoding="utf-8")
    return site


def _wheel_requirements(whl: Path) -> list[str]:
    with zipfile.ZipFile(whl) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(meta).decode()
    return [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


@pytest.mark.slow
def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    missing = [name for name in BUNDLED_IN_WHEEL if name not in names]
    assert not missing, f"not in {wheel.name}: {missing}"
    top_level = {name.split("/", 1)[0] for name in names}
    others = top_level - {"triage"}
    assert len(others) == 1 and others.pop().endswith(".dist-info"), (
        f"the wheel must hold the `triage` package only, not {sorted(top_level)}"
    )
    assert not any(name.startswith(("tools/", "playbooks/", "SKILL.md")) for name in names)
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("triage/playbooks/hang.md").startswith(b"+++")
        assert zf.read("triage/SKILL.md") == (REPO / "SKILL.md").read_bytes()


@pytest.mark.slow
def test_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    site = _make_venv(tmp_path, wheel, _wheel_requirements(wheel))
    bin_dir = tmp_path / "venv" / "bin"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = _clean_env()
    python = str(bin_dir / "python")

    probe = (
        "import triage, triage.plugins as p; print(triage.__file__); "
        "print(*(p.bundled_dir(n) for n in ('tools', 'playbooks', 'SKILL.md')), sep='\\n')"
    )
    paths = [Path(line) for line in _run([python, "-c", probe], outside, env).splitlines()]
    package = site / "triage"
    assert paths == [
        package / "__init__.py",
        package / "tools",
        package / "playbooks",
        package / "SKILL.md",
    ], "the wheel, not the checkout, must provide triage"

    triage_cmd = str(bin_dir / "triage")
    assert "hang" in _listed_playbooks(_run([triage_cmd, "playbooks", "list"], outside, env))
    tools = _listed_tools(_run([triage_cmd, "tools", "list"], outside, env))
    assert {"dump_stacks", "discover_ranks"} <= tools
    assert "hang" in _listed_playbooks(
        _run([python, "-m", "triage", "playbooks", "list"], outside, env)
    )
    skills = tmp_path / "skills"
    _run([triage_cmd, "skill", "install", "--target", str(skills)], outside, env)
    assert list(skills.glob("*/SKILL.md")), "skill install found no SKILL.md in the wheel"

    for name in ("tools", "playbooks"):
        proc = subprocess.run(
            [python, "-c", f"import {name}"], cwd=outside, env=env, capture_output=True, text=True
        )
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, (
            f"`import {name}` must fail in a wheel install: {proc.stdout}{proc.stderr}"
        )


@pytest.mark.slow
def test_editable_install_exposes_only_triage(tmp_path: Path) -> None:
    _require_hatchling()
    if importlib.util.find_spec("editables") is None:
        pytest.skip("building an editable wheel needs the `editables` package")
    out = tmp_path / "editable"
    build = f"from hatchling.build import build_editable; print(build_editable({str(out)!r}))"
    whl = Path(_run([sys.executable, "-c", build], REPO, _clean_env()).strip().splitlines()[-1])
    whl = whl if whl.is_absolute() else out / whl

    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        pth_lines = [
            line.strip()
            for n in names
            if n.endswith(".pth")
            for line in zf.read(n).decode().splitlines()
        ]
    path_entries = [
        Path(line) for line in pth_lines if line and not line.startswith(("import", "#"))
    ]
    assert not [p for p in path_entries if (p / "tools").exists()], (
        f"the editable install adds the checkout root to sys.path: {path_entries}"
    )
    assert not [n for n in names if n.startswith("triage/")], (
        "copies of force-included files in an editable install shadow the checkout"
    )

    _make_venv(tmp_path, whl, _wheel_requirements(whl))
    python = str(tmp_path / "venv" / "bin" / "python")
    env = _clean_env()
    probe = "import triage.plugins as p; print(p.__file__); print(p.bundled_dir('tools'))"
    assert _run([python, "-c", probe], tmp_path, env).split() == [
        str(REPO / "triage" / "plugins.py"),
        str(REPO / "tools"),
    ]
    tools = _listed_tools(
        _run([str(tmp_path / "venv" / "bin" / "triage"), "tools", "list"], tmp_path, env)
    )
    assert {"dump_stacks", "discover_ranks"} <= tools
    proc = subprocess.run(
        [python, "-c", "import tools"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0, "an editable install must not make `tools` importable"
