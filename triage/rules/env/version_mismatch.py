"""comm.version_mismatch from the environment: ranks load different torch or NCCL versions."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import EnvironmentFacts
from triage.readers.environment import environment_view, odd_ones, spread
from triage.registry import EvidenceSet, rule


@rule("env.version_mismatch", "comm.version_mismatch")
def version_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks of the job run different torch or NCCL builds.

    What it detects:
    The torch version (torch/version.py next to the libtorch a rank has mapped) or the NCCL
    version (libnccl's file name or its pip wheel) differs between ranks.

    Why it happens:
    Ranks started from different virtual environments or container images, a stale
    LD_LIBRARY_PATH pointing one rank at a system NCCL, a partial upgrade.

    Evidence:
    /proc/PID/maps of each rank and the versions its libraries declare.

    Fix:
    Run every rank from one environment (same image, same venv); unset LD_LIBRARY_PATH
    entries that shadow the NCCL torch was built with.

    Known false positives:
    Versions that could not be read are not compared.

    References:
    NCCL release notes (protocol compatibility across versions); `torch.cuda.nccl.version()`.
    """
    view = environment_view(evidence)
    facts = [f for _, f in view.ranks]
    for library, versions in (
        ("torch", _versions(facts, "torch")),
        ("NCCL", _versions(facts, "nccl")),
    ):
        if len(versions) < 2:
            continue
        yield Finding(
            title=f"ranks load different {library} versions",
            summary=f"Ranks load different {library} versions: {spread(versions)}.",
            ranks=odd_ones(versions),
            confidence=0.7,
            evidence=[e.id for e, _ in view.ranks],
            fix="Run every rank from the same environment (image, venv); remove LD_LIBRARY_PATH "
            "entries that shadow the NCCL torch ships with.",
            confirm="`python -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'` "
            "differs between the ranks' environments",
        )


def _versions(facts: list[EnvironmentFacts], library: str) -> dict[str, list[EnvironmentFacts]]:
    out: dict[str, list[EnvironmentFacts]] = {}
    for f in facts:
        version = f.torch_version if library == "torch" else f.nccl_version
        if version:
            out.setdefault(version, []).append(f)
    return out
