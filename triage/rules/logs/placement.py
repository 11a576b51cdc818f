"""wrong.placement from logs: a DTensor's placements are not the ones the op expects."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view
from triage.rules.logs._signals import ids, ranks_of, signals, tracebacks

_FIX = (
    "Make the placements agree with what the op and the parallel plan assume: check the "
    "plan's input/output layouts (ColwiseParallel's output is Shard(-1), RowwiseParallel's "
    "Partial before its reduction), redistribute explicitly where they meet, keep "
    "use_local_output consistent, and give uneven shards their true sizes; print "
    "`tensor.placements` on each side of the failing op to find the first mismatch."
)


@rule("logs.placement", "wrong.placement")
def placement(evidence: EvidenceSet) -> Iterator[Finding]:
    """An error names a DTensor placement that differs from the one expected.

    What it detects:
    Two placements compared on one line (`placements (Shard(dim=0),) but ... expects
    (Partial(sum),)`, `Replicate() vs Shard(0)`), or an exception whose message is about a
    DTensor's placements (`ValueError: ... DTensor has placements (Shard(dim=0),),`).
    Weaker (0.5), a matmul refused by its meta kernel (`a and b must have same reduction
    dim, but got [9, 18] X [16, 10]`) outside torch.compile: DTensor checks shapes on fake
    tensors, and an uneven shard re-wrapped as even fails there.

    Why it happens:
    A tensor-parallel plan whose layouts do not chain (a module's output placement is not
    the next one's input), a sharding strategy missing for an op so DTensor falls back to
    another placement, `use_local_output` mixing plain tensors with DTensors, or uneven
    shards treated as even. Results are wrong or the op refuses to run.

    Evidence:
    The placement the tensor has and, when the line says, the one expected.

    Fix:
    Align the plan's layouts, redistribute explicitly where they meet, keep uneven shard
    sizes.

    Known false positives:
    A line that quotes two placements while describing an intended redistribution.

    References:
    torch.distributed.tensor (DTensor placements); torch.distributed.tensor.parallel.
    """
    found = [
        (e, s)
        for e, s in signals(evidence, "dtensor.placement_mismatch")
        if "has" in s.fields or s.fields.get("got") != s.fields.get("want")
    ]
    if not found:
        yield from _refused(evidence)
        yield from _matmul_shapes(evidence)
        return
    fields = found[0][1].fields
    compared = "got" in fields
    what = (
        f"a DTensor is {fields['got']} where {fields['want']} is expected"
        if compared
        else f"an error about a DTensor placed as {fields.get('has')}"
    )
    ranks = ranks_of(s for _, s in found)
    yield Finding(
        title="a DTensor's placement is not the one the op expects",
        summary=f"{what[0].upper()}{what[1:]}: `{found[0][1].text[:200]}`",
        ranks=ranks,
        location=comm_view(evidence).location(ranks),
        confidence=0.7 if compared else 0.55,
        evidence=ids(found)[:8],
        fix=_FIX,
        confirm="print `t.placements` of the op's inputs and output on one rank: one side "
        "differs from the plan's layout",
    )


def _refused(evidence: EvidenceSet) -> Iterator[Finding]:
    """DTensor refused an op on what it was given: the plan left a tensor plain, put two
    tensors on different meshes, or asks for a layout DTensor cannot make there."""
    found = signals(evidence, "dtensor.refused")
    if not found:
        return
    line = found[0][1]
    ranks = ranks_of(s for _, s in found)
    yield Finding(
        title=f"DTensor refused an op: {line.fields['what']}",
        summary=f"`{line.text.strip()[:200]}` ({line.path}:{line.line}): the parallel plan gave"
        f" the op {line.fields['what']}, which DTensor does not run.",
        ranks=ranks,
        location=comm_view(evidence).location(ranks),
        confidence=0.55,
        evidence=ids(found)[:8],
        fix=_FIX
        + " A plain tensor among DTensors needs DTensor.from_local (or distribute_tensor); two"
        " meshes need one parent mesh (slice the DP, TP and EP meshes from one init_device_mesh),"
        " or the op run per mesh (clip_grad_norm_ per group of parameters).",
        confirm="print the type and `.device_mesh`/`.placements` of the op's inputs on one rank",
    )


def _matmul_shapes(evidence: EvidenceSet) -> Iterator[Finding]:
    """A matmul whose operands' shapes disagree in the meta kernel's check, outside
    torch.compile: DTensor checks shapes on fake tensors as it propagates shardings, and a
    shard re-wrapped with the wrong global size (an uneven split treated as even) fails
    there. Under torch.compile the same check runs on the graph, and nothing says DTensor."""
    found = signals(evidence, "dtensor.matmul_shapes")
    if not found or _compiled(evidence):
        return
    fields = found[0][1].fields
    ranks = ranks_of(s for _, s in found)
    yield Finding(
        title="a matmul's shapes disagree in DTensor's shape propagation",
        summary=(
            f"A matmul of [{fields.get('a')}] by [{fields.get('b')}] failed the meta kernel's"
            " shape check, which runs on the fake tensors DTensor propagates shardings with:"
            " the global shape of a sharded operand is not what its shards add up to, as"
            " when an uneven shard is re-wrapped as an even one (use_local_output, a plain"
            " tensor turned back into a DTensor)."
        ),
        ranks=ranks,
        location=comm_view(evidence).location(ranks),
        confidence=0.5,
        evidence=ids(found)[:8],
        fix=_FIX,
        confirm="the failing op's inputs are DTensors whose shapes differ from what each"
        " rank's shards add up to",
    )


def _compiled(evidence: EvidenceSet) -> bool:
    """Whether the failure came through torch.compile: dynamo's frames or its wrapper."""
    return any(
        _COMPILED.search(f"{t.exception} {t.message}") or any("_dynamo" in f.file for f in t.frames)
        for _, t in tracebacks(evidence)
    ) or any(_COMPILED.search(s.text) for _, s in signals(evidence))


_COMPILED = re.compile(r"torch\._dynamo|Failed running call_function|TorchRuntimeError")
