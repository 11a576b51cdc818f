"""wrong.init_mismatch from logs: the ranks print different values of state they must share."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._rank_prints import (
    WHERE_AND_WHEN,
    Printed,
    is_number,
    printed,
    without_rank,
)
from triage.rules.logs._signals import ids, shows_failure, signals

#: Names whose values differ per rank by design (where it runs, what it drew, how it did).
_PER_RANK = re.compile(
    rf"(?i){WHERE_AND_WHEN}|seed|loss|acc|metric|score|reward|grad|norm|batch|sample|idx|"
    r"index|\bids?\b|file|path|name|image|token|shape|size|len|count|num|tensor|data|input|"
    r"output|local|shard|offset|start|end"
)
#: Names of numbers every replica must hold alike: the weights and their checksums.
_REPLICATED = re.compile(r"(?i)param|weight|checksum|hash|md5|sha|crc|fingerprint")
#: A setting's value: a flag, a dtype or mode word, a short string (not a number or a list).
_SETTING = re.compile(r"(?i)^['\"]?[a-z_][\w.\-]{0,30}['\"]?$")


@rule("logs.rank_state_differs", "wrong.init_mismatch")
def rank_state_differs(evidence: EvidenceSet) -> Iterator[Finding]:
    """The ranks print different values of a setting or of a weight checksum they must share.

    What it detects:
    Per-rank prints (`rank 0: amp=False`, `rank 1: amp=True`; `[rank 0] param checksum:
    1234.5`) of one name at one point of the run whose values differ across ranks: a flag,
    a dtype or mode word, or a number named after the weights (param, weight, checksum,
    hash). Values that differ only by the rank's own number (`cuda:0` on rank 0, `cuda:1`
    on rank 1) and names that are per-rank by design (device, host, seed, loss, batch,
    sample, gradients before their reduction, ...) are not compared.

    Why it happens:
    Data parallelism assumes every replica runs the same program on the same weights. A
    setting decided on one rank (a probe for AMP support, a config read from a local file,
    an environment variable set on one node) and not broadcast, or weights initialised
    without a shared seed or a broadcast, leave replicas that compute different things:
    the loss stops matching a single-GPU run, or one rank's half-precision path overflows.

    Evidence:
    The prints of the name on each rank.

    Fix:
    Decide the value once and share it: compute it on rank 0 and broadcast it
    (`dist.broadcast_object_list`, or broadcast a tensor and keep the broadcast result, not
    the temporary it came from) before it is used; for weights, seed every rank alike before
    building the model, or let DDP/FSDP broadcast rank 0's module state at wrap time.

    Megatron's `Parameter hashes not matching across DP replicas` (0.45: its check of every
    parameter's hash across the data-parallel group).

    Known false positives:
    A value that legitimately depends on the rank under a name the list above does not know
    (a per-rank schedule, a rank's own shard id). The finding is weak, and it is not made
    when the text shows a failure, whose rules name its cause.

    References:
    https://pytorch.org/docs/stable/notes/ddp.html
    """
    hashes = signals(evidence, "replicas.hashes_differ")
    if hashes:
        yield Finding(
            title="the data-parallel replicas' weights differ (Megatron's hash check)",
            summary=f"`{hashes[0][1].text.strip()[:160]}`: the replicas of one model hold"
            " different weights. Before the first iteration that is how they started (a"
            " checkpoint loaded differently, an init without a shared seed, parameters a"
            " parallel layout shards on purpose); later it is a gradient or update some"
            " replicas did not share.",
            ranks=[],
            confidence=0.45,
            evidence=ids(hashes)[:8],
            fix="Find the first parameter that differs (Megatron logs its name per rank with"
            " the check) and when: at iteration 0, load and initialise every replica alike"
            " (one seed, one checkpoint, every rank); later, look for gradients reduced over"
            " a smaller group than the data-parallel one (a custom optimizer or a parameter"
            " outside the DDP buckets).",
            confirm="the check passes right after loading and fails only after some"
            " iterations (an update) or fails at once (the start)",
        )
        return
    if shows_failure(evidence):
        return
    for entry in printed(evidence):
        if _differs(entry):
            yield _finding(entry)
            return


def _differs(entry: Printed) -> bool:
    if _PER_RANK.search(entry.key) or not entry.key:
        return False
    values = {without_rank(value, rank) for rank, value in entry.values.items()}
    if len(values) < 2:
        return False
    if all(is_number(value) for value in values):
        return _REPLICATED.search(entry.key) is not None
    return all(_SETTING.match(value) for value in values)


def _finding(entry: Printed) -> Finding:
    shown = ", ".join(f"rank {r}: {entry.key}={v}" for r, v in sorted(entry.values.items()))
    where = f" at {entry.position}" if entry.position else ""
    return Finding(
        title=f"ranks disagree on `{entry.key}`{where}",
        summary=f"The ranks print different values of `{entry.key}`{where} ({shown[:200]}):"
        " state every replica must share differs, so the replicas compute different things.",
        ranks=[],
        confidence=0.5,
        evidence=[item.id for item, _ in entry.lines.values()][:8],
        fix=f"Decide `{entry.key}` once and share it: compute it on rank 0 and broadcast it"
        " (`dist.broadcast_object_list`, or keep the result of the tensor broadcast rather than"
        " the temporary it was made from) before it is used; for weights, seed every rank alike"
        " before building the model or let DDP/FSDP broadcast rank 0's state.",
        confirm=f"print `{entry.key}` on every rank right after it is set: one value on every"
        " rank rules this out",
    )
