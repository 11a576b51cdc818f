"""Install the triage Agent Skill into the folders coding agents read skills from.

A skill is a folder named after the skill holding SKILL.md and the files its body
links to (the playbooks). Agents find skills only in fixed places, so installing is
copying that folder there; SKILL.md and the playbooks come from `bundled_dir`, so a
checkout and an installed wheel install the same skill.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from triage.plugins import bundled_dir

# Skill folders per agent, relative to the home directory (user) or the current
# working directory (project). Codex and Cursor share the vendor-neutral `.agents`.
AGENT_DIRS: dict[str, str] = {
    "claude": ".claude/skills",
    "codex": ".agents/skills",
    "cursor": ".agents/skills",
    "gemini": ".gemini/skills",
}
AGENTS: tuple[str, ...] = (*AGENT_DIRS, "all")
SCOPES: tuple[str, ...] = ("user", "project")
SPEC_KEYS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)
NAME_RE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
MAX_NAME = 64


def split_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """SKILL.md's top-level frontmatter keys (values as raw text) and its body.

    Deliberately tiny instead of a YAML dependency: the spec's keys are plain
    scalars, and `metadata` (a mapping) is kept as its indented text.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError("SKILL.md has no frontmatter (first line must be ---)")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        raise ValueError("SKILL.md frontmatter is not closed by a --- line") from None
    fields: dict[str, str] = {}
    key: str | None = None
    for line in lines[1:end]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() and key is not None:  # continuation of the previous key
            fields[key] = (fields[key] + "\n" + line.strip()).strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"SKILL.md frontmatter line is not 'key: value': {line!r}")
        key = key.strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key] = value
    return fields, "\n".join(lines[end + 1 :])


def skill_name(skill_md: Path) -> str:
    """The skill's `name`; agents require it to equal the folder name, so check it here."""
    fields, _ = split_frontmatter(skill_md.read_text(encoding="utf-8"))
    name = fields.get("name", "")
    if len(name) > MAX_NAME or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"SKILL.md name {name!r} is not lowercase a-z0-9 and hyphens, <= {MAX_NAME}"
        )
    return name


def skill_dirs(agent: str = "claude", scope: str = "user") -> list[Path]:
    """The distinct skills directories for an agent (or all agents) and scope."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; choose one of: {', '.join(AGENTS)}")
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; choose one of: {', '.join(SCOPES)}")
    base = Path.home() if scope == "user" else Path.cwd()
    names = list(AGENT_DIRS) if agent == "all" else [agent]
    dirs: list[Path] = []
    for name in names:
        path = base / AGENT_DIRS[name]
        if path not in dirs:
            dirs.append(path)
    return dirs


def _install_one(skills_dir: Path, name: str, skill_md: Path, playbooks: Path) -> Path:
    """Build the skill folder beside its destination, then swap it in.

    Staging and swapping means a re-install replaces the old copy completely
    (no stale playbooks left behind) and a failed copy leaves the old one intact.
    """
    skills_dir.mkdir(parents=True, exist_ok=True)
    dest = skills_dir / name
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=skills_dir))
    try:
        shutil.copy2(skill_md, staging / "SKILL.md")
        shutil.copytree(
            playbooks, staging / "playbooks", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        staging.chmod(0o755)
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return dest / "SKILL.md"


def install_skill(
    agent: str = "claude", scope: str = "user", target: Path | None = None
) -> list[Path]:
    """Install the skill for `agent` and return the installed SKILL.md paths.

    `target` is a skills directory that overrides the agent folders (the skill goes
    to `<target>/<name>/`); `agent` is still validated so typos fail loudly.
    """
    dirs = skill_dirs(agent, scope)
    if target is not None:
        dirs = [Path(target).expanduser().resolve()]
    skill_md = bundled_dir("SKILL.md")
    playbooks = bundled_dir("playbooks")
    name = skill_name(skill_md)
    return [_install_one(d, name, skill_md, playbooks) for d in dirs]


def mcp_server_command() -> list[str]:
    """How an agent starts `triage mcp`: by name when PATH finds `triage`, else through this
    interpreter, which has triage installed (a virtual environment that is not activated)."""
    if shutil.which("triage"):
        return ["triage", "mcp"]
    return [sys.executable, "-m", "triage", "mcp"]


def mcp_hint() -> str:
    """What to run so an agent that speaks MCP can call triage's tools, printed after install."""
    argv = mcp_server_command()
    config = {"mcpServers": {"triage": {"command": argv[0], "args": argv[1:]}}}
    missing = importlib.util.find_spec("mcp") is None
    return "\n".join(
        [
            "Agents that speak MCP can also call triage's tools through `triage mcp`"
            + (" (first: pip install 'triage[mcp]')" if missing else "")
            + ":",
            f"  Claude Code: claude mcp add triage -- {shlex.join(argv)}",
            f"  Codex:       codex mcp add triage -- {shlex.join(argv)}",
            f"  Any other client (its mcpServers JSON): {json.dumps(config)}",
        ]
    )
