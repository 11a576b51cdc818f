"""Next steps that fit the job: none for a backend it does not run, none for a setting it
already runs with.

A playbook's steps are written once for every job, but `triage run` sets NCCL_DEBUG=INFO
and the Flight Recorder's buffer itself, and a gloo job on CPU has no NCCL to debug. A
step names what it advises as NAME=VALUE in its own text, so the settings are read from
there and compared with what the evidence shows, with no bookkeeping per step.
"""

from __future__ import annotations

import re
from typing import Any

from triage.models import Report
from triage.observations import EnvironmentFacts, FROverview, LogSignal, SnapshotSummary
from triage.registry import EvidenceSet

_SETTING = re.compile(r"\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)=([^\s;()]+)")
_NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")
#: Log signatures only gloo's own failures match (its transport's errors, its timeouts).
_GLOO_SIGNATURES = ("gloo.", "hang.gloo_")


def advised_settings(step: str) -> dict[str, str]:
    """The variables a step tells the user to set: 'Set NCCL_DEBUG=INFO' -> NCCL_DEBUG."""
    return {name: value.rstrip(".,:") for name, value in _SETTING.findall(step)}


def job_environments(report: Report) -> list[dict[str, str]]:
    """The environments the ranks ran with, as far as the report knows: each rank's, read
    from /proc, and the one `triage run` started the whole job with (the settings it set
    and the user's own values it kept, in its targets)."""
    launched = _strings(report.targets.get("env_kept")) | _strings(report.targets.get("env_set"))
    ranks = [
        facts.variables
        for _, facts in EvidenceSet(report.evidence).payloads(EnvironmentFacts)
        if facts.scope == "rank"
    ]
    return ([launched] if launched else []) + ranks


def runs_without_nccl(evidence: EvidenceSet) -> bool:
    """The evidence shows a job that runs no NCCL: gloo's own failures in its logs, gloo in
    its dumps or snapshots, or only hosts without an NVIDIA GPU; and nothing that names NCCL
    (a log line, a traceback, a backend)."""
    backends = {b.lower() for _, o in evidence.payloads(FROverview) for b in o.backends}
    backends |= {(s.backend or "").lower() for _, s in evidence.payloads(SnapshotSummary)}
    lines = [
        e.summary.lower() for kind in ("log_signal", "traceback") for e in evidence.of_kind(kind)
    ]
    if any("nccl" in text for text in [*backends, *lines]):
        return False
    signatures = {s.signature for _, s in evidence.payloads(LogSignal)}
    hosts = [f for _, f in evidence.payloads(EnvironmentFacts) if f.scope == "host"]
    return (
        any("gloo" in backend for backend in backends)
        or any(name.startswith(_GLOO_SIGNATURES) for name in signatures)
        or (bool(hosts) and all(f.nvidia_devices == 0 for f in hosts))
    )


def useful_steps(steps: list[str], report: Report) -> list[str]:
    """`steps` less those that advise NCCL settings to a job without NCCL, and those whose
    every setting each rank already has (a step the job has, in effect, done)."""
    environments = job_environments(report)
    without_nccl = runs_without_nccl(EvidenceSet(report.evidence))
    kept = []
    for step in steps:
        advised = advised_settings(step)
        if without_nccl and any(name.startswith(_NCCL_PREFIXES) for name in advised):
            continue
        if advised and all(_held(environments, n, v) for n, v in advised.items()):
            continue
        kept.append(step)
    return kept


def _held(environments: list[dict[str, str]], name: str, value: str) -> bool:
    """Every known environment sets `name` to `value`; for a file name, to any value
    (where the files go is the user's choice)."""
    any_value = "/" in value or "%" in value
    return bool(environments) and all(
        name in env and (any_value or env[name].lower() == value.lower()) for env in environments
    )


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
