"""The agent skill: SKILL.md follows the Agent Skills spec and installs where agents look."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from triage.plugins import bundled_dir
from triage.skill import AGENTS, SPEC_KEYS, install_skill, skill_name, split_frontmatter

from .conftest import triage_cli

SKILL_MD = bundled_dir("SKILL.md")
FIELDS, BODY = split_frontmatter(SKILL_MD.read_text(encoding="utf-8"))
NAME = FIELDS["name"]
# Markdown links [text](dest); images too. Destinations with a scheme or anchor-only are external.
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _relative_links(body: str) -> list[str]:
    # Ignore fenced code blocks: jq filters and shell lines are not links.
    prose = re.sub(r"```.*?```", "", body, flags=re.S)
    out = []
    for dest in LINK_RE.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", dest) or dest.startswith("#"):
            continue
        out.append(dest.split("#", 1)[0])
    return out


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


# --- SKILL.md against the spec ----------------------------------------------------------


def test_frontmatter_has_only_spec_keys() -> None:
    assert {"name", "description"} <= FIELDS.keys()
    assert set(FIELDS) <= SPEC_KEYS


def test_name_format() -> None:
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", NAME)
    assert len(NAME) <= 64
    assert skill_name(SKILL_MD) == NAME


def test_description_length_and_no_angle_brackets() -> None:
    description = FIELDS["description"]
    assert 0 < len(description) <= 1024
    assert "<" not in description and ">" not in description
    # says what it does and when to use it
    assert "Use it when" in description
    for word in ("hang", "NCCL", "gloo", "timeout", "memory", "divergent", "torchrun"):
        assert word in description, word


def test_optional_fields_within_spec_limits() -> None:
    assert len(FIELDS.get("compatibility", "")) <= 500


def test_body_is_short_and_teaches_the_workflow() -> None:
    assert len(BODY.splitlines()) < 500
    for needle in (
        "triage hang --pids", "--launcher-pid", "triage tools list", "triage tools run",
        "triage playbooks", "triage rules list", "triage skill install", "triage demo",
        "triage analyze", "triage mcp", "CAP_SYS_PTRACE", "ptrace_scope", "schema_version",
        "hang.mismatched_collective", "hang.rank_exited", "hang.unknown", "Never kill",
    ):  # fmt: skip
        assert needle in BODY, needle


def test_body_names_only_known_cause_ids() -> None:
    from triage.taxonomy import CAUSES

    mentioned = set(re.findall(r"`((?:hang|comm|oom|wrong|config)\.[a-z_]+)`", BODY))
    assert mentioned
    # taxonomy.md allows `<family>.unknown` in every family
    unknown = {cause for cause in mentioned if cause.endswith(".unknown")}
    assert mentioned - unknown <= set(CAUSES), mentioned - unknown - set(CAUSES)


def test_body_links_to_the_hang_playbook() -> None:
    assert "playbooks/hang.md" in _relative_links(BODY)


def test_every_relative_link_resolves_in_the_installed_folder(tmp_path: Path) -> None:
    [installed] = install_skill(target=tmp_path)
    _, body = split_frontmatter(installed.read_text(encoding="utf-8"))
    links = _relative_links(body)
    assert links
    for link in links:
        assert (installed.parent / link).is_file(), link


# --- installing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "folder"),
    [
        ("claude", ".claude/skills"),
        ("codex", ".agents/skills"),
        ("cursor", ".agents/skills"),
        ("gemini", ".gemini/skills"),
    ],
)
def test_user_install_per_agent(home: Path, agent: str, folder: str) -> None:
    installed = install_skill(agent=agent)
    assert installed == [home / folder / NAME / "SKILL.md"]
    assert installed[0].read_text(encoding="utf-8") == SKILL_MD.read_text(encoding="utf-8")
    assert (installed[0].parent / "playbooks" / "hang.md").is_file()


@pytest.mark.parametrize(
    ("agent", "folder"),
    [
        ("claude", ".claude/skills"),
        ("codex", ".agents/skills"),
        ("cursor", ".agents/skills"),
        ("gemini", ".gemini/skills"),
    ],
)
def test_project_install_per_agent(home: Path, cwd: Path, agent: str, folder: str) -> None:
    installed = install_skill(agent=agent, scope="project")
    assert installed == [cwd / folder / NAME / "SKILL.md"]
    assert installed[0].is_file()
    assert not any(home.iterdir()), "project scope must not touch HOME"


def test_all_installs_each_distinct_folder_once(home: Path) -> None:
    installed = install_skill(agent="all")
    assert sorted(installed) == sorted(
        home / folder / NAME / "SKILL.md"
        for folder in (".claude/skills", ".agents/skills", ".gemini/skills")
    )
    assert all(path.is_file() for path in installed)


def test_target_overrides_agent_folders(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "skills"
    assert install_skill(agent="all", target=target) == [target.resolve() / NAME / "SKILL.md"]
    assert not any(home.iterdir())


def test_reinstall_replaces_cleanly(home: Path) -> None:
    [first] = install_skill()
    folder = first.parent
    (folder / "playbooks" / "stale.md").write_text("left over from an older version")
    first.write_text("edited by hand")
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))

    [second] = install_skill()
    assert second == first
    assert second.read_text(encoding="utf-8") == SKILL_MD.read_text(encoding="utf-8")
    assert not (folder / "playbooks" / "stale.md").exists()
    after = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    assert after == [p for p in before if p.name != "stale.md"]
    # no staging folders left next to the skill
    assert [p.name for p in folder.parent.iterdir()] == [NAME]


@pytest.mark.parametrize("agent", ["bogus", "Claude", ""])
def test_invalid_agent_raises(home: Path, agent: str) -> None:
    with pytest.raises(ValueError, match="claude") as info:
        install_skill(agent=agent)
    assert "\n" not in str(info.value)
    assert not any(home.iterdir())


def test_invalid_scope_raises(home: Path) -> None:
    with pytest.raises(ValueError, match="scope"):
        install_skill(scope="global")


def test_agents_listed() -> None:
    assert set(AGENTS) == {"claude", "codex", "gemini", "cursor", "all"}


# --- the CLI ---------------------------------------------------------------------------


def test_cli_install_into_target(tmp_path: Path) -> None:
    done = subprocess.run(
        triage_cli("skill", "install", "--agent", "claude", "--target", str(tmp_path)),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    installed = tmp_path.resolve() / NAME / "SKILL.md"
    assert installed.is_file()
    assert str(installed) in done.stdout


def test_cli_bogus_agent_is_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run(
        triage_cli("skill", "install", "--agent", "bogus", "--target", str(tmp_path)),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("triage: error:")
    assert "bogus" in lines[0]
    assert "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())


def test_body_is_decisive_and_fits_an_agents_context() -> None:
    """Workflow, how to confirm, when not to trust: per-family detail lives in playbooks."""
    assert len(SKILL_MD.read_bytes()) < 8_000
    for needle in ("--debug-detail --hang-after", "--kill-on-hang", "rank groups tie", "one of"):
        assert needle in BODY, needle


def test_every_table_has_a_header_row() -> None:
    lines = BODY.splitlines()
    for index, line in enumerate(lines):
        starts = line.startswith("|") and not lines[index - 1].startswith("|")
        if starts:  # the first row of a table is its header: a separator row follows it
            assert re.fullmatch(r"\|(\s*-+\s*\|)+", lines[index + 1]), line
