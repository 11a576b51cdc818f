"""Redaction: what leaves the machine carries no credential, by name or by shape, while
the text around it (what a model needs to read the failure) survives."""

from __future__ import annotations

import json

import pytest

from triage.redact import MASK, is_secret_name, redact_environment, redact_text, redact_value

# Credentials by shape, each standing alone in prose.
SHAPED = [
    "hf_" + "Q7wErTy8UiOp9AsDfGh0JkLzXcVbNm1234",
    "sk-ant-api03-" + "Zx9" * 12,
    "sk-proj-" + "a1B2" * 8,
    "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4",
    "github_pat_" + "11ABCDEFG0" * 3,
    "xoxb-1234567890-abcdefghij",
    "glpat-" + "abcDEF123_-" * 2,
    "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "pypi-AgEIcHlwaS5vcmc" + "x" * 40,
    "ya29.a0AfH6SMBx" + "y" * 20,
]


@pytest.mark.parametrize("secret", SHAPED)
def test_credentials_are_masked_by_shape(secret: str) -> None:
    text = f"[rank3]: RuntimeError: request with {secret} was refused"
    redacted = redact_text(text)
    assert secret not in redacted
    assert redacted.startswith("[rank3]: RuntimeError: request with") and "refused" in redacted


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HF_TOKEN=abc123 next", f"HF_TOKEN={MASK} next"),
        ('export DB_PASSWORD="two words here" done', f'export DB_PASSWORD="{MASK}" done'),
        ("password='it is' ok", f"password='{MASK}' ok"),
        ('{"api_key": "abc def", "x": 1}', f'{{"api_key": "{MASK}", "x": 1}}'),
        ("AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG", f"AWS_SECRET_ACCESS_KEY: {MASK}"),
        ("--hf-token abc123 --steps 3", f"--hf-token {MASK} --steps 3"),
        ("Authorization: Bearer abcdefghijklmnop", f"Authorization: {MASK}"),
        ("https://user:hunter2@example.com/repo", f"https://user:{MASK}@example.com/repo"),
        (
            "AccountName=a;AccountKey=abc==;Endpoint=x",
            f"AccountName=a;AccountKey={MASK};Endpoint=x",
        ),
    ],
)
def test_values_of_secret_names_are_masked(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_escaped_json_and_basic_auth_leave_no_credential() -> None:
    escaped = '{\\"token\\": \\"abc def\\", \\"step\\": 3}'
    assert "abc" not in redact_text(escaped) and '\\"step\\": 3' in redact_text(escaped)
    basic = redact_text("Authorization: Basic dXNlcjpwYXNzd29yZA==")
    assert "dXNlcjpwYXNzd29yZA" not in basic and basic.startswith("Authorization: ")


@pytest.mark.parametrize(
    "prose",
    [
        "auth failed for user alice",
        "NCCL WARN Call to connect returned Connection refused, retrying",
        "tokens per second: 1234",
        "KeyboardInterrupt at step 3",
        'key=""',
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ],
)
def test_prose_is_left_alone(prose: str) -> None:
    assert redact_text(prose) == prose


def test_redaction_is_idempotent() -> None:
    text = 'HF_TOKEN="a b" Authorization: Basic dXNlcg== ' + " ".join(SHAPED)
    once = redact_text(text)
    assert redact_text(once) == once


def test_structured_values_are_masked_by_key_then_by_shape() -> None:
    data = {
        "env": {"WANDB_API_KEY": "abc", "PORT": 29500, "NCCL_DEBUG": "INFO"},
        "lines": [f"token {SHAPED[0]}", {"session_id": 42}],
        "secret_count": 3,
    }
    out = redact_value(data)
    assert out["env"] == {"WANDB_API_KEY": MASK, "PORT": 29500, "NCCL_DEBUG": "INFO"}
    assert out["lines"] == [f"token {MASK}", {"session_id": MASK}]
    assert out["secret_count"] == MASK
    assert SHAPED[0] not in json.dumps(out)


def test_environments_mask_secret_names_and_shapes() -> None:
    env = {"HF_TOKEN": "x", "MASTER_ADDR": "10.0.0.1", "EXTRA": f"--key {SHAPED[1]}"}
    assert redact_environment(env) == {
        "HF_TOKEN": MASK,
        "MASTER_ADDR": "10.0.0.1",
        "EXTRA": f"--key {MASK}",
    }


def test_secret_names() -> None:
    for name in ("HF_TOKEN", "aws_secret_access_key", "--api-key", "X-Api-Key", "AccountKey"):
        assert is_secret_name(name), name
    for name in ("MASTER_ADDR", "NCCL_SOCKET_IFNAME", "monkey", "keyboard"):
        assert not is_secret_name(name), name
