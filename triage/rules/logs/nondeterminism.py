"""wrong.nondeterminism from logs: torch reports an op with no deterministic kernel."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding, Location
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._signals import Signal, ids, ranks_of, signals
from triage.text import rank_label

_TEXT = re.compile(r"deterministic")
_LIBRARY = ("site-packages", "dist-packages")
_FIX = (
    "Nondeterministic kernels make runs differ (atomics in scatter/index_add/embedding "
    "backward, cuBLAS split-K, cuDNN autotuning). For reproducible runs: export "
    "CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8) before the process starts, set "
    "torch.backends.cudnn.benchmark = False and torch.backends.cudnn.deterministic = True, "
    "call torch.use_deterministic_algorithms(True) and replace or move to CPU the ops it "
    "names, and seed every rank (torch.manual_seed, numpy, random, DataLoader "
    "worker_init_fn/generator). Differences of float rounding size are expected otherwise."
)


@rule("logs.nondeterminism", "wrong.nondeterminism")
def nondeterminism(evidence: EvidenceSet) -> Iterator[Finding]:
    """Deterministic algorithms were requested and torch names ops that are not deterministic.

    What it detects:
    torch's alert `X does not have a deterministic implementation, but you set
    'torch.use_deterministic_algorithms(True)'` (torch <= 1.7: `torch.set_deterministic(True)`)
    as a RuntimeError, or with `warn_only=True` as a warning (`UserWarning` or
    `[W Context.cpp] Warning:`), and cuBLAS's `... this operation is not deterministic because
    it uses CuBLAS and you have CUDA >= 10.2 ... CUBLAS_WORKSPACE_CONFIG=:4096:8`.

    Why it happens:
    GPU kernels that accumulate with atomics (scatter_add, index_add, embedding and
    interpolation backward, CTC loss), cuBLAS reductions without a fixed workspace and
    cuDNN's benchmark autotuning give bitwise different results run to run; the alert says
    such ops are in play, so results that differ between runs or ranks follow.

    Evidence:
    The ops torch names, whether it warned or raised, the ranks and the calling line.

    Fix:
    CUBLAS_WORKSPACE_CONFIG, cudnn.deterministic/benchmark, use_deterministic_algorithms,
    deterministic replacements for the named ops, seeding every rank and worker.

    Known false positives:
    The alert only appears when the user asked for determinism; a run that warns but
    whose differences come from data order or seeds has another cause too.

    References:
    torch.use_deterministic_algorithms; https://pytorch.org/docs/stable/notes/randomness.html;
    cuBLAS results reproducibility (CUBLAS_WORKSPACE_CONFIG).
    """
    alerts = signals(evidence, "determinism.no_deterministic_impl")
    cublas = signals(evidence, "determinism.cublas_workspace")
    every = alerts + cublas
    if not every:
        return
    warned = [item for item in alerts if "warn_only" in item[1].fields.get("args", "")] + [
        item for item in cublas if "Warning" in item[1].text
    ]
    ops = sorted({s.fields["op"] for _, s in every if s.fields.get("op")})
    if cublas and not any(s.fields.get("op") for _, s in cublas):
        ops.append("cuBLAS matmul")
    ranks = ranks_of(s for _, s in every)
    how = (
        "warned (warn_only=True): the run went on with them"
        if warned
        else "raised: deterministic mode stopped the run"
    )
    on = f" on {rank_label(ranks)}" if ranks else ""
    what = f"nondeterministic op{'s' if len(ops) > 1 else ''} {', '.join(ops[:6])}"
    yield Finding(
        title=f"{what} under use_deterministic_algorithms",
        summary=f"torch reports {what}{on} and {how}: `{every[0][1].text[:200]}`.",
        ranks=ranks,
        location=comm_view(evidence).location(ranks, _TEXT) or _warned_at(every),
        confidence=0.7 if warned else 0.65,
        evidence=ids(every)[:12],
        fix=_FIX,
        confirm="with CUBLAS_WORKSPACE_CONFIG=:4096:8, cudnn.benchmark=False and the named ops "
        "replaced, two runs with the same seed give identical losses",
    )


def _warned_at(items: list[Signal]) -> Location | None:
    """The user line a Python warning names (`file.py:LINE: UserWarning:`), not a library's."""
    for _, s in items:
        path = s.fields.get("file")
        if path and not any(part in path for part in _LIBRARY):
            return Location(file=path, line=int(s.fields["lineno"]))
    return None
