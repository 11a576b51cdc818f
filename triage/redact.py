"""Secret redaction for everything that leaves the process: reports, LLM requests, MCP
answers, probe files.

Two nets. By name: values of variables, keys and options named like secrets (token,
password, pass, pwd, api_key, ...). By shape: strings that look like credentials wherever
they appear (provider key prefixes, bearer tokens, AWS key ids and secret keys, JWTs, URLs
with passwords, PEM private keys), whatever the variable that holds them is called. Only
the standard library, so `triage.probe` can use it inside a training job.
"""

from __future__ import annotations

import functools
import re
from typing import Any

MASK = "[REDACTED]"

SECRET_NAME = re.compile(
    r"(?i)token|secret|passw|credential|api_?key|access_?key|account_?key|private|auth|"
    r"cookie|session|signature|(?:^|[_-])key(?:[_-]|$)|(?:^|[_-])(?:pass|pwd|passwd)(?:[_-]|$)"
)
#: The shell's working directories: named like a password, holding a path.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})

_SHAPES = [
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S
    ),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),  # Anthropic (sk-ant-...), OpenAI
    re.compile(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
    re.compile(r"\bnpm_[A-Za-z0-9]{30,}"),
    re.compile(r"\bpypi-[A-Za-z0-9_\-]{40,}"),
    re.compile(r"\bya29\.[A-Za-z0-9_\-]{20,}"),  # Google OAuth access tokens
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
# A quoted value is masked up to its closing quote (or the end of the line), spaces and
# all; quotes may be backslash-escaped, as in a log line that holds JSON.
_ASSIGNMENT = re.compile(
    r"""(?P<key>\\?["']?(?:--)?[A-Za-z_][A-Za-z0-9_.\-]*\\?["']?)(?P<sep>\s*[=:]\s*|\s+)"""
    r"""(?:(?P<dopen>\\?")(?P<dq>[^"\n]*)"?|(?P<sopen>\\?')(?P<sq>[^'\n]*)'?|(?P<value>[^\s"',;}]+))"""
)
# `Authorization: Basic dXNlcjpwYXNz`: the credential follows the scheme word.
_AUTH_HEADER = re.compile(
    r"(?i)(?P<head>\b(?:proxy-)?authorization\s*[:=]\s*(?:[A-Za-z\-]+\s+)?)"
    r"(?P<value>[^\s\"',;]+)"
)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^/\s@]+@")
# An AWS secret access key (40 characters of base64) with no name before it: mixed case
# and digits, no word-like run of lower-case letters (a path of 40 such characters has).
_KEY_CANDIDATE = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_LOWER_RUN = re.compile(r"[a-z]{7}")


def _mask_random_keys(text: str) -> str:
    return _KEY_CANDIDATE.sub(lambda m: MASK if _random_key(m[0]) else m[0], text)


def _random_key(token: str) -> bool:
    return (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
        and not _LOWER_RUN.search(token)
    )


# Whatever a net above looks for by name or prefix holds one of these (lower-cased): text
# without any is left alone after a few substring tests (most of a report: stacks, NCCL
# lines, counts), at C speed, but for the one net that has no anchor word, the unnamed
# 40-character key (`_KEY_CANDIDATE`).
_ANCHOR_WORDS = (
    "token", "secret", "pass", "pwd", "credential", "key", "private", "auth", "cookie",
    "session", "signature", "sk-", "sk_", "rk_", "npm_", "pypi-", "ya29.", "ghp_", "gho_",
    "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "hf_", "glpat-", "aiza", "akia", "asia",
    "eyj", "bearer", "://", "-----begin",
)  # fmt: skip


def _has_anchor(text: str) -> bool:
    lower = text.lower()
    return any(word in lower for word in _ANCHOR_WORDS)


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """A variable, key or option whose value must never leave the host."""
    bare = name.strip("\\\"'-")
    return bare not in _NOT_SECRET and bool(SECRET_NAME.search(bare))


@functools.lru_cache(maxsize=1 << 16)  # a job's ranks repeat the same lines and frames
def redact_text(text: str) -> str:
    """`text` with credential-shaped strings and values of secret-named keys masked."""
    if not _has_anchor(text):
        # A long path is a 40-character run too; only an exact one that reads as random
        # is masked, which a scan that rarely matches finds at C speed.
        return text if len(text) < 40 else _mask_random_keys(text)
    for shape in _SHAPES:
        text = shape.sub(MASK, text)
    text = _mask_random_keys(text)
    text = _URL_PASSWORD.sub(lambda m: m["scheme"] + MASK + "@", text)
    text = _AUTH_HEADER.sub(lambda m: m[0] if m["value"] == MASK else m["head"] + MASK, text)

    return _mask_assignments(text)


def _mask_assignments(text: str) -> str:
    """Mask the value after each secret-named key. A key that is not secret gives up only
    its own text, so `failed: HF_TOKEN=...` still reaches the scan at `HF_TOKEN`."""
    out: list[str] = []
    pos = 0
    while m := _ASSIGNMENT.search(text, pos):
        inner = next(g for g in ("value", "dq", "sq") if m[g] is not None)
        prose = m["sep"].strip() == "" and not m["key"].startswith("-")  # `auth failed`
        if (
            not is_secret_name(m["key"])
            or prose
            or m[inner].rstrip("\\") in (MASK, "")
            or _named_key(m["key"], m[inner])
        ):
            out.append(text[pos : m.end("key")])
            pos = m.end("key")
            continue
        opening = m["dopen"] or m["sopen"] or ""
        closing = text[m.end(inner) : m.end()]
        out.append(f"{text[pos : m.start()]}{m['key']}{m['sep']}{opening}{MASK}{closing}")
        pos = m.end()
    return "".join(out) + text[pos:]


def _named_key(name: str, value: str) -> bool:
    """A `key` (or `..._key`) whose value is words or a small number, not a credential:
    torch's `key: store_based_barrier_key:1`, a store or dict key in a log line."""
    bare = name.strip("\\\"'-").lower()
    if not bare.endswith("key"):
        return False
    return (bare == "key" and _WORDS.fullmatch(value) is not None) or (
        value.isdigit() and len(value) <= 6
    )


#: Lower-case words and numbers joined by `_`, `.`, `:` or `/`, at least one word of three.
_WORDS = re.compile(r"(?=.*[a-z]{3})[a-z0-9]+(?:[_.:/][a-z0-9]+)*")

#: triage's own field names that read like secrets: a failure signature's name, the LLM
#: pass's token counts.
_OWN_KEYS = frozenset(
    {
        "signature",
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    }
)


def redact_value(value: Any, key: str | None = None) -> Any:
    """A copy of JSON-like data with secrets masked: by key name, then by shape."""
    own = key in _OWN_KEYS
    if key is not None and not own and is_secret_name(key) and isinstance(value, str | int | float):
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
