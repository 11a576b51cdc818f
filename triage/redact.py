"""Secret redaction for everything that leaves the process: LLM requests, probe files.

Two nets. By name: values of variables, keys and options named like secrets (token,
password, api_key, ...). By shape: strings that look like credentials wherever they
appear (provider key prefixes, bearer tokens, AWS key ids, JWTs, URLs with passwords,
PEM private keys). Only the standard library, so `triage.probe` can use it inside a
training job.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "[REDACTED]"

SECRET_NAME = re.compile(
    r"(?i)token|secret|passw|credential|api_?key|access_?key|private|auth|cookie|"
    r"session|signature|(?:^|[_-])key(?:[_-]|$)"
)

_SHAPES = [
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S
    ),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{12,}=*"),
]
# `NAME=value`, `name: value`, `"name": "value"`, `--name value` where NAME looks secret.
_ASSIGNMENT = re.compile(
    r"""(?P<key>["']?(?:--)?[A-Za-z_][A-Za-z0-9_.\-]*["']?)(?P<sep>\s*[=:]\s*|\s+)"""
    r"""(?P<quote>["']?)(?P<value>[^\s"',;}]+)"""
)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^/\s@]+@")


def is_secret_name(name: str) -> bool:
    """A variable, key or option whose value must never leave the host."""
    return bool(SECRET_NAME.search(name.strip("\"'-")))


def redact_text(text: str) -> str:
    """`text` with credential-shaped strings and values of secret-named keys masked."""
    for shape in _SHAPES:
        text = shape.sub(MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m["scheme"] + MASK + "@", text)

    def assignment(m: re.Match[str]) -> str:
        if not is_secret_name(m["key"]) or m["value"] == MASK:
            return m[0]
        if m["sep"].strip() == "" and not m["key"].startswith(("--", "-")):
            return m[0]  # `auth failed` is prose, not `--auth value`
        return f"{m['key']}{m['sep']}{m['quote']}{MASK}"

    return _ASSIGNMENT.sub(assignment, text)


def redact_value(value: Any, key: str | None = None) -> Any:
    """A copy of JSON-like data with secrets masked: by key name, then by shape."""
    if key is not None and is_secret_name(key) and isinstance(value, str | int | float):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def redact_environment(environ: dict[str, str]) -> dict[str, str]:
    """An environment with secret-named variables masked and credential shapes removed."""
    return {k: MASK if is_secret_name(k) else redact_text(v) for k, v in environ.items()}
