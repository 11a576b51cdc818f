"""config.ddp_reducer from logs: DDP's reducer saw a parameter ready twice or the graph change."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding, Location
from triage.observations import TracebackRecord
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import CommView, comm_view
from triage.rules.logs._signals import Signal, ids, ranks_of, signals
from triage.text import rank_label

_TEXT = re.compile(r"ready only once|ready twice|graph has changed|static_graph")
_AUTOGRAD = re.compile(r"(^|/)torch/autograd/(__init__|graph)\.py$")
_ENGINE = frozenset({"_engine_run_backward", "backward"})
_CHECKPOINT = re.compile(r"checkpoint", re.IGNORECASE)
FIX_REENTRANT = (
    "Use non-reentrant activation checkpointing: torch.utils.checkpoint.checkpoint(..., "
    "use_reentrant=False) (transformers: gradient_checkpointing_kwargs={'use_reentrant': "
    "False}); do not checkpoint the same module twice. If the graph is the same every "
    "iteration, DistributedDataParallel(..., static_graph=True) is the workaround."
)
_FIX_TWICE = (
    "Each parameter may produce one gradient per backward: do not use a module or parameter "
    "outside forward or in two forwards before one backward, and do not wrap one module in "
    "two reentrant checkpoints (use use_reentrant=False). DistributedDataParallel(..., "
    "static_graph=True) is the workaround when the graph does not change between iterations."
)
_FIX_STATIC = (
    "static_graph=True requires the same parameters to take part every iteration: drop "
    "static_graph (use find_unused_parameters=True for data-dependent branches), or make "
    "every iteration use the same modules, including the first one."
)


@rule("logs.ddp_reducer", "config.ddp_reducer")
def ddp_reducer(evidence: EvidenceSet) -> Iterator[Finding]:
    """DDP's reducer cannot follow the backward graph: a parameter was marked ready twice,
    or the graph changed under static_graph=True.

    What it detects:
    `Expected to mark a variable ready only once` with its `Parameter at index N [with name
    X] has been marked as ready twice` line; the static-graph error `Your training graph has
    changed in this iteration, e.g., one parameter is unused in first iteration, but then got
    used in the second iteration. this is not compatible with static_graph set to True`;
    DeepSpeed ZeRO 1/2's own reducer meeting a gradient computed twice (`The parameter 447
    has already been reduced. Gradient computed twice for this partition`); torch.compile
    against the reducer (0.75: `Compiled autograd is not compatible with C++ DDP Reducer`,
    DDPOptimizer's `Found a higher order op in the graph`). A traceback in
    which backward runs inside backward (autograd's engine entered twice, a
    `backward` frame of a checkpoint module) marks reentrant activation checkpointing.

    Why it happens:
    DDP registers one hook per parameter and expects it to fire once per backward. Reentrant
    checkpointing (torch.utils.checkpoint with use_reentrant=True, the transformers and
    unsloth defaults for years) re-runs forward inside backward, so a parameter used by two
    checkpointed regions, or a module used twice, fires its hook twice; so does a parameter
    used outside forward. Under static_graph=True DDP records the used parameters in the
    first iteration and fails when a later iteration uses one it did not.

    Evidence:
    The reducer error, the parameter it names, the ranks that print it, and the user line of
    the traceback (the backward call, or the custom backward that re-enters autograd).

    Fix:
    use_reentrant=False for activation checkpointing; no module or parameter used twice or
    outside forward; static_graph=True as the workaround when the graph is the same every
    iteration, and without static_graph when it is not.

    Known false positives:
    `Expected to have finished reduction in the prior iteration` (parameters without a
    gradient) is logs.unused_parameters' case, not this rule's; where both errors appear this
    one scores low.

    References:
    torch.nn.parallel.DistributedDataParallel docs (static_graph; the note on
    torch.utils.checkpoint); huggingface/trl#912 (use_reentrant=False for PEFT + DDP);
    pytorch/pytorch#65537.
    """
    yield from _compiled(evidence)
    twice = signals(evidence, "ddp.marked_ready_twice", "zero.reduced_twice")
    changed = signals(evidence, "ddp.graph_changed")
    if not (twice or changed):
        return
    view = comm_view(evidence)
    unused = signals(evidence, "ddp.unfinished_reduction", "ddp.lightning_unused")
    reentrant = [(e, t) for e, t in view.tracebacks if _reentry(t)]
    ranks = ranks_of(s for _, s in twice + changed)
    who = f" ({rank_label(ranks)})" if ranks else ""
    reducer = "DDP" if any(s.signature == "ddp.marked_ready_twice" for _, s in twice) else "ZeRO"
    if twice and reentrant:
        what = (
            f"{reducer} marked a parameter ready twice: reentrant backward (activation"
            " checkpointing)"
        )
        detail = _named(twice) + (
            f" The traceback re-enters autograd inside backward ({_reentry(reentrant[0][1])})."
        )
        confidence, fix, items = 0.92, FIX_REENTRANT, twice
    elif twice:
        what = f"{reducer} marked a parameter ready twice in one backward"
        detail = _named(twice)
        confidence, fix, items = 0.85, _FIX_TWICE, twice
    else:
        what = "the used parameters changed between iterations under DDP static_graph=True"
        detail = ""
        confidence, fix, items = 0.92, _FIX_STATIC, changed
    if unused and not reentrant:
        confidence = 0.6
    yield Finding(
        title=what + who,
        summary=f"{what}: `{_quote(items)}`.{detail}",
        ranks=ranks,
        location=_location(view, ranks),
        confidence=confidence,
        evidence=(ids(twice + changed) + [e.id for e, _ in reentrant])[:12],
        fix=fix,
        confirm="the error goes away with use_reentrant=False checkpointing, or with "
        "static_graph=False",
    )


def _reentry(record: TracebackRecord) -> str:
    """Where a traceback runs backward inside backward: a checkpoint module's `backward`
    frame, or autograd's engine entered twice; '' when it does not."""
    for frame in record.frames:
        if frame.function.rsplit(".", 1)[-1] == "backward" and _CHECKPOINT.search(frame.file):
            return f"{frame.file.rsplit('/', 1)[-1]}:{frame.line} in backward"
    engine = [f for f in record.frames if f.function in _ENGINE and _AUTOGRAD.search(f.file)]
    entries = max(
        sum(f.function == "backward" for f in engine),
        sum(f.function == "_engine_run_backward" for f in engine),
    )
    return "autograd's backward entered twice" if entries >= 2 else ""


def _named(twice: list[Signal]) -> str:
    """The parameter DDP names (by name with TORCH_DISTRIBUTED_DEBUG, else by index)."""
    names = sorted({str(s.fields["parameter"]) for _, s in twice if s.fields.get("parameter")})
    if names:
        return f" Parameter {', '.join(names[:4])} got its gradient twice in one backward."
    indices = sorted({int(s.fields["index"]) for _, s in twice if s.fields.get("index")})
    if indices:
        shown = ", ".join(map(str, indices[:4]))
        return (
            f" Parameter index {shown} got its gradient twice in one backward "
            "(TORCH_DISTRIBUTED_DEBUG=INFO names it)."
        )
    return ""


def _quote(items: list[Signal]) -> str:
    """The error in its own words, without the exception name, cut for a summary."""
    text = items[0][1].text.removeprefix("RuntimeError: ")
    return text if len(text) <= 140 else text[:137] + "..."


def _location(view: CommView, ranks: list[int]) -> Location | None:
    """The user line of the failing rank's traceback; every rank runs the same script, so
    another rank's traceback of the error stands in when the failing rank's is cut off."""
    return view.location(ranks, _TEXT) or view.location([], _TEXT)


def _compiled(evidence: EvidenceSet) -> Iterator[Finding]:
    """torch.compile and DDP's reducer: compiled autograd cannot run the C++ reducer's hooks,
    and DDPOptimizer cannot split a graph holding a higher-order op at the buckets."""
    found = signals(evidence, "ddp.compiled_reducer")
    if not found:
        return
    yield Finding(
        title="torch.compile cannot follow DDP's reducer here",
        summary=f"`{_quote(found)}`: DDP's gradient hooks and the compiled graph disagree"
        " (compiled autograd replaces the engine the C++ reducer hooks into; DDPOptimizer"
        " splits the graph at DDP's buckets and cannot split a higher-order op such as"
        " activation checkpointing).",
        ranks=ranks_of(s for _, s in found),
        confidence=0.75,
        evidence=ids(found)[:12],
        fix="Set torch._dynamo.config.optimize_ddp = 'python_reducer' (compiled autograd with"
        " DDP), or optimize_ddp = False (no bucket splitting: DDPOptimizer and higher-order ops),"
        " or compile the module inside DDP's wrapper with checkpointing outside it.",
        confirm="the error goes away with torch._dynamo.config.optimize_ddp changed",
    )
