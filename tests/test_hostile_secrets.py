"""Secrets in the evidence reach no output meant for a ticket: the terminal, `--json`,
markdown and HTML mask them by default, whatever names (or no name) they carry; the
hang report's command lines and environments too. `--no-redact` shows them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import triage_cli
from triage.readers import signatures
from triage.redact import is_secret_name

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"[:40]
HF = "hf_" + "Q7wErTy8UiOp9AsDfGh0JkLzXcVbNm1234"
SECRETS = {
    "aws": AWS_SECRET,
    "db_pass": "Hunter2dbpass",
    "pwd": "S3cretPwdValue",
    "option": "OptionPass99",
    "url": "UrlPassw0rd",
    "hf": HF,
}
LOG = (
    f"[rank0]: loading credentials {SECRETS['aws']} for the bucket\n"
    f'[rank0]: DB_PASS={SECRETS["db_pass"]} {{"pwd": "{SECRETS["pwd"]}"}}\n'
    f"[rank0]: launched: python train.py --db-pass {SECRETS['option']} --steps 3\n"
    f"[rank0]:torch.distributed.DistBackendError: NCCL error: unhandled system error,"
    f" store https://admin:{SECRETS['url']}@store.example.com token {SECRETS['hf']}\n"
)


def _analyze(folder: Path, *args: str) -> str:
    done = subprocess.run(
        triage_cli("analyze", str(folder), *args),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    (tmp_path / "rank0.log").write_text(LOG)
    return tmp_path


@pytest.mark.parametrize("fmt", ["json", "markdown", "html", "terminal"])
def test_no_secret_in_any_format(logs: Path, fmt: str) -> None:
    out = _analyze(logs, "--format", fmt)
    leaked = [name for name, secret in SECRETS.items() if secret in out]
    assert not leaked, leaked
    assert "[REDACTED]" in out


def test_no_redact_shows_them_for_local_debugging(logs: Path) -> None:
    out = _analyze(logs, "--json", "--no-redact")
    assert SECRETS["url"] in out and SECRETS["hf"] in out


@pytest.fixture
def rank_with_secrets() -> Iterator[int]:
    env = {
        "PATH": "/usr/bin:/bin",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "HF_TOKEN": HF,
        "HARMLESS_LOOKING": AWS_SECRET,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "--db-pass", SECRETS["option"]],
        env=env,
    )
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_hang_reports_command_lines_and_environments_are_masked(
    rank_with_secrets: int,
) -> None:
    done = subprocess.run(
        triage_cli("hang", "--pids", str(rank_with_secrets), "--json"),
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--db-pass" in done.stdout  # the command line is there, its value is not
    for secret in (HF, AWS_SECRET, SECRETS["option"]):
        assert secret not in done.stdout


def test_triages_own_fields_survive_redaction() -> None:
    """A log signal's `signature` and the LLM pass's token counts read like secrets by name."""
    from triage.models import Evidence, LlmRun, Report
    from triage.redacted import redacted

    report = Report(
        symptom="hang",
        playbook="hang",
        evidence=[
            Evidence(
                id="s", kind="log_signal", source="a", summary="x", data={"signature": "nccl.warn"}
            )
        ],
        llm=LlmRun(model="m", outcome="report", input_tokens=12, output_tokens=3),
    )
    again = redacted(report)
    assert again.evidence[0].data["signature"] == "nccl.warn"
    assert again.llm is not None and again.llm.input_tokens == 12


def test_no_signature_names_a_field_the_redactor_would_hide() -> None:
    """A field of a failure line named like a secret (`key`, `token`, `pass`...) prints as
    [REDACTED] in every JSON report, whatever it holds: the store key a rank waited for,
    what a step line measured. Fields carry the facts of a failure under plain names."""
    named = {
        (sig.name, group)
        for sig in signatures.load().values()
        for group in sig.pattern.groupindex
        if is_secret_name(group)
    }
    assert not named, sorted(named)
