"""Reproducibility and distributed evaluation: nondeterministic kernels and sharded metrics.

Nondeterminism: with `torch.use_deterministic_algorithms(True)` (torch <= 1.7:
`torch.set_deterministic(True)`) an op without a deterministic kernel raises
`RuntimeError: index_add_cuda_ does not have a deterministic implementation, but you set
'torch.use_deterministic_algorithms(True)'. ...`; with `warn_only=True` (torch >= 1.11) it
warns the same with `'torch.use_deterministic_algorithms(True, warn_only=True)'`, as a
Python `UserWarning` or a C++ `[W Context.cpp:82] Warning: ...`. cuBLAS on CUDA >= 10.2
without CUBLAS_WORKSPACE_CONFIG reports `... but this operation is not deterministic
because it uses CuBLAS and you have CUDA >= 10.2. ... CUBLAS_WORKSPACE_CONFIG=:4096:8 ...`.

Evaluation sharding: Lightning warns that evaluating with a DistributedSampler replicates
samples (`... to ensure each sample/batch gets evaluated exactly once`), and that epoch-level
metrics logged without `sync_dist=True` are not accumulated across devices; accelerate's
`gather_for_metrics` says when it cannot drop the padded remainder.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

# --- wrong.nondeterminism ----------------------------------------------------------------

_WARNED_AT = r"(?:(?P<file>[^\s:\[\]]+\.py):(?P<lineno>\d+): \w*Warning: )?"
"""The `file.py:LINE: UserWarning: ` prefix Python puts before a warning: the calling line."""

signature(
    "determinism.no_deterministic_impl",
    _WARNED_AT + r"(?P<op>[\w.:]+) does not have a deterministic implementation, but you set "
    r"'(?P<setting>torch\.(?:use_deterministic_algorithms|set_deterministic)\((?P<args>[^)]*)\))'",
    anchors="does not have a deterministic implementation, but you set",
    summary="an op without a deterministic kernel ran while deterministic algorithms were requested",
)

signature(
    "determinism.cublas_workspace",
    _WARNED_AT
    + r".*?(?:operation (?:\.?(?P<op>[\w.:]+) )?)?is not deterministic because it uses CuBLAS"
    r"(?: and you have CUDA >= 10\.2)?",
    anchors="is not deterministic because it uses CuBLAS",
    summary="cuBLAS ran without CUBLAS_WORKSPACE_CONFIG while deterministic algorithms were requested",
)

# --- wrong.eval_sharding -----------------------------------------------------------------

signature(
    "eval.distributed_sampler",
    r"(?:During `trainer\.(?P<stage>\w+)\(\)`.{0,80}?)?"
    r"to ensure each sample/batch gets evaluated(?: exactly once|\s*$)"
    r"|`DistributedSampler` that replicates some"
    r"|samples to make sure all devices have same batch size",  # the same warning, wrapped
    anchors=(
        "to ensure each sample/batch gets evaluated",
        "`DistributedSampler` that replicates some",
        "samples to make sure all devices have same batch size",
    ),
    summary="Lightning evaluates with a DistributedSampler, which pads ranks with repeated samples",
)

signature(
    "eval.metric_not_synced",
    r"It is recommended to use `self\.log\(['\"](?P<metric>[^'\"]*)['\"], \.\.\., sync_dist=True\)` "
    r"when logging on epoch level in distributed setting",
    anchors="when logging on epoch level in distributed setting",
    summary="Lightning logs an epoch-level metric without sync_dist: each rank reports its own shard",
)

# DeiT's and MAE's evaluation (and the scripts copied from them) warn before padding the
# sampler: `Warning: Enabling distributed evaluation with an eval dataset not divisible by
# process number. This will slightly alter validation results as extra duplicate entries are
# added to achieve equal num of samples per-process.`
signature(
    "eval.padded_warning",
    r"Enabling distributed evaluation with an eval dataset not divisible by process number",
    anchors="eval dataset not divisible by process number",
    summary="distributed evaluation pads the dataset with duplicates to split it evenly",
)

signature(
    "eval.gather_remainder",
    r"The used dataset had no length, returning gathered tensors\. You should drop the remainder yourself",
    anchors="You should drop the remainder yourself",
    summary="accelerate's gather_for_metrics could not drop the samples padded onto the last batch",
)

# torchvision's reference scripts (and the many training scripts copied from them) compare
# the samples evaluated with the dataset's length after distributed evaluation.
signature(
    "eval.samples_mismatch",
    # the video references say `sampler has` and spell it `teh validation`
    r"It looks like the (?:dataset|sampler) has (?P<dataset>\d+) samples, but (?P<used>\d+)"
    r" samples were used for te?he? validation",
    anchors=("samples were used for the validation", "samples were used for teh validation"),
    summary="evaluation saw more or fewer samples than the dataset holds (sampler padding or"
    " drop_last)",
    extract=lambda m: {"dataset": int(m["dataset"]), "used": int(m["used"])},
)

_METRIC = re.compile(
    r"(?i)\b(?P<name>loss|acc(?:uracy)?(?:@\d+)?|top-?\d|prec(?:ision)?(?:@\d+)?|miou|map|f1)"
    r"\b\s*[:=]?\s*(?P<value>-?\d+\.\d+(?:e[-+]?\d+)?)"
)


def _eval_batch(found: re.Match[str]) -> dict[str, Any]:
    metrics = [f"{m['name'].lower()}={m['value']}" for m in _METRIC.finditer(found["rest"])]
    return {
        "stage": found["stage"].lower(),
        "step": int(found["step"]),
        "steps": int(found["steps"]),
        "metrics": ";".join(metrics),
    }


# A per-batch evaluation line (`Test: [ 0/49]  Time ...  Loss 9.5338e-01  Acc@1 75.10`):
# its batch counter and the metric values it printed, to tell whether several processes
# evaluated the same batches.
signature(
    "eval.batch_metrics",
    r"(?i)\b(?P<stage>test|val|valid|validation|eval|evaluation)\b\W{0,3}\[\s*(?P<step>\d+)"
    r"\s*/\s*(?P<steps>\d+)\s*\](?P<rest>.*)",
    anchors=tuple(
        f"{word}{sep}["
        for word in ("Test", "test", "Val", "val", "Valid", "Validation", "Eval", "eval")
        for sep in (": ", " ", ":")
    ),
    summary="a per-batch evaluation line: its batch counter and the metrics it printed",
    extract=_eval_batch,
)

# --- wrong.placement ---------------------------------------------------------------------

_PLACEMENT = r"(?:Shard|Replicate|Partial|_StridedShard)\([^()]*\)"


def _placements(found: re.Match[str]) -> dict[str, Any]:
    return {k: v for k, v in found.groupdict().items() if v}


signature(
    "dtensor.placement_mismatch",
    # Two placements compared on one line, or an exception about a DTensor's placements
    # (whose expected side often wraps to the next line).
    rf"placements?\b[^\n]{{0,40}}?(?P<got>{_PLACEMENT})[^\n]{{0,160}}?"
    rf"(?:expect|require|but|!=|\bvs\b|mismatch|differ)[^\n]{{0,80}}?(?P<want>{_PLACEMENT})"
    rf"|(?:Error|Exception): [^\n]*?\bplacements?\b[^\n]{{0,40}}?(?P<has>{_PLACEMENT})",
    anchors=("placement",),
    summary="a DTensor's placements differ from what the op or the plan expects",
    extract=_placements,
)

# The meta kernel of a matmul (torch/_meta_registrations.py) refusing its operands' shapes:
# shapes checked on fake tensors, as DTensor's sharding propagation does. Eager CUDA or CPU
# kernels word it `mat1 and mat2 shapes cannot be multiplied`.
signature(
    "dtensor.matmul_shapes",
    r"a and b must have same reduction dim, but got \[(?P<a>[\d, ]+)\] X \[(?P<b>[\d, ]+)\]",
    anchors="a and b must have same reduction dim",
    summary="a matmul's shapes disagree in a shape check on fake tensors (DTensor's propagation)",
)

# --- wrong.seeding -----------------------------------------------------------------------

# Lightning's seed_everything prints the seed per rank: `[rank: 1] Global seed set to 0`
# (Lightning < 2.1), `[rank: 1] Seed set to 0` (later).
signature(
    "seed.rank_seed",
    r"\[rank: (?P<rank>\d+)\] (?:Global seed|Seed) set to (?P<seed>-?\d+)",
    anchors=("Global seed set to", "Seed set to"),
    summary="Lightning's seed_everything: the seed one rank set for every RNG",
    extract=lambda found: {"rank": int(found["rank"]), "seed": int(found["seed"])},
)
