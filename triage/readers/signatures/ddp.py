"""DDP's reducer errors (parameters without gradients) and NaN/Inf in training.

DDP fails on the iteration after a parameter got no gradient: `Expected to have finished
reduction in the prior iteration`, followed (torch >= 1.9) by the parameter indices and,
with TORCH_DISTRIBUTED_DEBUG=INFO/DETAIL, the names that got no gradient on each rank.
Reentrant checkpointing fires a parameter's hook twice: `Expected to mark a variable ready
only once`. NaNs show up as anomaly-mode errors, non-finite gradient norms, loss-scaler
give-ups and training loops that print a NaN loss.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

# --- wrong.unused_parameters -------------------------------------------------------------

signature(
    "ddp.unfinished_reduction",
    r"Expected to have finished reduction in the prior iteration before starting a new one"
    r"(?P<graph_changed>.*?your training graph has changed)?",
    anchors="Expected to have finished reduction in the prior iteration",
    summary="DDP: some parameters got no gradient in the last iteration (unused in forward on this rank)",
)


def _names(found: re.Match[str]) -> dict[str, Any]:
    names = [n.strip() for n in found["names"].split(",") if n.strip()]
    return {"parameters": names}


signature(
    "ddp.unused_parameter_names",
    r"Parameters which did not receive grad for rank (?P<rank>\d+): (?P<names>.+)",
    anchors="Parameters which did not receive grad for rank",
    summary="DDP names the parameters that got no gradient on this rank",
    extract=_names,
)

signature(
    "ddp.unused_parameter_indices",
    r"Parameter indices which did not receive grad for rank (?P<rank>\d+): (?P<indices>[\d ]+)",
    anchors="Parameter indices which did not receive grad for rank",
    summary="DDP lists the indices of the parameters that got no gradient on this rank",
    extract=lambda found: {"indices": [int(i) for i in found["indices"].split()]},
)

signature(
    "ddp.marked_ready_twice",
    r"Expected to mark a variable ready only once"
    r"|Parameter at index (?P<index>\d+)(?: with name (?P<parameter>\S+))? has been marked as ready twice",
    anchors=("Expected to mark a variable ready only once", "has been marked as ready twice"),
    summary="DDP saw a parameter's gradient hook fire twice (reentrant checkpointing, shared parameters)",
)

# DeepSpeed ZeRO 1/2's own reducer meeting the same: `The parameter 447 has already been
# reduced. Gradient computed twice for this partition. Multiple gradient reduction is
# currently not supported` (the newer wording names the parameter).
signature(
    "zero.reduced_twice",
    r"The parameter (?P<parameter>\S+) has already been reduced\.\s+Gradient computed twice",
    anchors="has already been reduced",
    summary="DeepSpeed ZeRO saw a parameter's gradient computed twice in one step",
)

# torch.utils.checkpoint's reentrant variant warns when no input of a checkpointed block
# requires grad (frozen embeddings under LoRA): the block's parameters get no gradient from
# it, or, re-run in backward, fire DDP's hooks out of turn.
signature(
    "ddp.reentrant_no_grad_inputs",
    r"None of the inputs have requires_grad=True\. Gradients will be None",
    anchors="None of the inputs have requires_grad=True",
    summary="reentrant activation checkpointing got no input that requires grad",
)

signature(
    "ddp.lightning_unused",
    r"LightningModule has parameters that were not used in producing the loss",
    anchors="has parameters that were not used in producing the loss",
    summary="Lightning's DDP strategy reports parameters unused in training_step's loss",
)

signature(
    "ddp.graph_changed",
    r"Your training graph has changed in this iteration",
    anchors="Your training graph has changed in this iteration",
    summary="DDP with static_graph=True saw a different set of used parameters than in the first iteration",
)

# torch.compile and DDP's reducer disagreeing: compiled autograd against the C++ reducer, and
# DDPOptimizer (which splits the compiled graph at DDP's buckets) meeting a higher-order op
# (activation checkpointing inside the compiled region).
signature(
    "ddp.compiled_reducer",
    r"Compiled autograd is not compatible with C\+\+ DDP Reducer"
    r"|DDPOptimizer backend: Found a higher order op in the graph",
    anchors=("Compiled autograd is not compatible with C++ DDP Reducer", "DDPOptimizer backend:"),
    summary="torch.compile cannot follow DDP's reducer here (compiled autograd, DDPOptimizer)",
)

# --- wrong.nan ---------------------------------------------------------------------------

signature(
    "nan.anomaly",
    r"Function '(?P<function>\w+)' returned (?P<value>nan|inf) values in its (?P<output>\d+)\w* output",
    anchors="values in its",
    summary="autograd anomaly detection found NaN/Inf produced by a backward function",
)

signature(
    "nan.nonfinite_grad_norm",
    r"The total norm of order (?P<order>\S+) for gradients from `parameters` is non-finite",
    anchors="is non-finite, so it cannot be clipped",
    summary="gradient clipping found a NaN/Inf gradient norm",
)

signature(
    "nan.loss_scale_floor",
    r"Current loss scale already at minimum|Minimum loss scale reached \((?P<scale>[\d.e-]+)\)"
    # apex's scaler halving below 1: every step overflows (healthy runs settle in the thousands)
    r"|reducing loss scale to (?P<below_one>0(?:\.\d+)?|\d(?:\.\d+)?e-\d+)\b"
    # fairseq's (`overflow detected, setting loss scale to: 0.25`), and DeepSpeed's and
    # FP16_Optimizer's at their floor of 1 (`Attempted loss scale: 1, reducing to 1`,
    # `Reducing dynamic loss scale from 1 to 1`)
    r"|setting loss scale to:? (?P<set_below_one>0\.\d+|\d(?:\.\d+)?e-\d+)\b"
    r"|Attempted loss scale: (?P<at_floor>1(?:\.0)?)(?![\d.])"
    r"|Reducing dynamic loss scale from (?P<from_floor>1(?:\.0)?) to 1\b",
    anchors=(
        "Current loss scale already at minimum",
        "Minimum loss scale reached",
        "reducing loss scale to ",
        "setting loss scale to",
        "Attempted loss scale: 1",
        "Reducing dynamic loss scale from 1 ",
    ),
    summary="the fp16 loss scaler kept finding Inf/NaN gradients until it gave up",
)

signature(
    "nan.floating_point_error",
    r"\bFloatingPointError\b:?\s*(?P<message>.*)",
    anchors="FloatingPointError",
    summary="a FloatingPointError: the training loop (detectron2, fairseq, numpy) stopped on a non-finite value",
)

signature(
    "nan.invalid_probabilities",
    r"probability tensor contains either `inf`, `nan` or element < 0",
    anchors="probability tensor contains either",
    summary="sampling got NaN/Inf probabilities (the model's outputs are non-finite)",
)

signature(
    "nan.found",
    # Lightning: `Detected nan and/or inf values in `model.encoder.weight``
    r"(?i)\b(?:found|detected)\s+(?:a\s+)?(?:nan|inf)s?(?:\s*(?:/|and/or)\s*inf)?\s+"
    r"(?:values?\s+)?in\s+`?(?P<what>[\w .]{1,60})"
    r"|\b(?:nan|inf)s?(?: or inf)?\s+(?:values?\s+)?(?:found|detected)\s+in\s+(?P<where>[\w .]{1,60})",
    anchors=(
        "found NaN",
        "found nan",
        "Found NaN",
        "Found nan",
        "detected NaN",
        "Detected NaN",
        "detected nan",
        "Detected nan",
        "NaN found in",
        "NaN or Inf found in",
        "NaN detected in",
        "nan detected in",
        "NaNs detected in",
        "nan found in",
        # Megatron's rerun check of a non-finite grad norm: `found Inf in local grad norm`
        "found Inf",
        "found inf",
        "Found Inf",
        "detected Inf",
        "Detected Inf",
        "Inf detected in",
        "Inf found in",
    ),
    summary="a check in the training code found NaN/Inf in a tensor (loss, gradients, activations)",
)

signature(
    "nan.count",
    r"(?i)\b(?:n|num|number[_ ]of|count[_ ]of)[_ ]?(?:nan|inf)s?\s*[=:]\s*(?P<count>[1-9]\d*)"
    r"(?:\s*/\s*(?P<of>\d+))?\b"
    r"|\b(?:nan|inf)s?[_ ]count\s*[=:]\s*(?P<count2>[1-9]\d*)\b"
    r"|\b(?:has|contains|any)[_ ](?:nan|inf)s?\s*[=:]\s*True\b",
    anchors=(
        "n_nan",
        "num_nan",
        "n_inf",
        "num_inf",
        "nan_count",
        "inf_count",
        "has_nan",
        "contains_nan",
        "any_nan",
        "has_inf",
        "number of nan",
        "number_of_nan",
    ),
    summary="a probe counted NaN/Inf values in a tensor (more than none)",
    extract=lambda found: (
        {"count": int(count)} if (count := found["count"] or found["count2"]) else {}
    ),
)

signature(
    "nan.rank_check",
    r"\bRank (?P<rank>\d+)\b[^\n]{0,100}?(?:found (?P<found>NaN|Inf) in (?P<what>[\w ]{1,60})"
    r"|Unexpected result (?P<value>nan|inf))",
    anchors=("found NaN in", "found Inf in", "Unexpected result nan", "Unexpected result inf"),
    summary="Megatron's per-rank check found NaN/Inf (local grad norm, loss) on this rank",
)

_NAN_VALUE = r"[-+]?(?:nan|inf(?:inity)?)"

signature(
    "nan.loss_value",
    r"(?i)(?:\b(?P<metric>[\w./-]*(?:loss|grad[_ ]?norm|perplexity|ppl)[\w./-]*)['\"]?"
    r"(?:\s*(?:[:=]|is|became)\s*|\s+)"
    rf"(?:tensor\()?['\"]?(?P<value>{_NAN_VALUE})\b"
    # mmcv's and mmengine's hook says `loss become infinite or NaN!`
    rf"|\b(?P<value2>nan|inf)\s+loss\b|loss bec[ao]me infinite or nan)",
    anchors=(
        ": nan",
        ":nan",
        "=nan",
        "= nan",
        "is nan",
        ": NaN",
        "=NaN",
        "= NaN",
        "is NaN",
        "(nan",
        ": inf",
        "=inf",
        "= inf",
        "is inf",
        ": -inf",
        "=-inf",
        " nan",
        " NaN",
        "NaN loss",
        "nan loss",
        "infinite or NaN",
    ),
    summary="the training loop reports a NaN/Inf loss or gradient norm",
    extract=lambda found: {"value": (found["value"] or found["value2"] or "nan").lower()},
)

# DDP compares the module's parameters across ranks when it wraps it: a rank whose model
# has other parameters (a rank-dependent layer, another checkpoint) stops it there.
signature(
    "ddp.model_differs",
    r"DDP expects same model across all ranks|"
    r"appears not to match (?:sizes|strides) of the same param in process \d+",
    anchors=("DDP expects same model across all ranks", "appears not to match"),
    summary="DDP found a rank whose model's parameters differ from rank 0's",
)
