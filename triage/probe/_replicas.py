"""`check_replicas()` and `comm_summary()`: checks a job runs on itself, in its tests or CI.

check_replicas is a collective (every rank of the group calls it): each rank sends a few
numbers per tensor (checksum, norm, NaN count, of the value and the gradient), never the
tensors, and every rank gets the same verdict back. comm_summary runs one step under
torch's CommDebugMode and keeps its counts, per op and per module, as evidence.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from triage.probe._common import dump_dir, loaded, write_atomic
from triage.probe._snapshot import clean_name, tensor_stats, unwrap

REPLICAS_PREFIX = "triage-replicas-"
_TINY = 1e-30
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Divergence:
    """One tensor that is not the same on every rank that should hold the same copy.

    `what`: "value", "grad", "grad_presence" (a .grad on some ranks only), "nonfinite"
    (NaN/Inf on some ranks), "placements" (a DTensor placed differently across ranks).
    `ranks` are the outliers (the minority; every rank when no majority), `agreeing` the
    ranks that agree with each other. `since_step` is the first step of the current run
    of checks at which this tensor diverged this way.
    """

    name: str
    kind: str
    what: str
    ranks: list[int]
    agreeing: list[int]
    since_step: int
    max_relative_diff: float | None = None
    detail: str = ""


@dataclass
class ReplicaReport:
    """The verdict of one check_replicas call, the same on every rank."""

    step: int
    ranks: list[int]
    compared: int
    diverging: list[Divergence] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.diverging

    def names(self, what: str | None = None) -> list[str]:
        """Names of the diverging tensors (of one kind of divergence when given)."""
        return sorted({d.name for d in self.diverging if what is None or d.what == what})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_history: dict[tuple[str, str], int] = {}
_steps = 0


def _local(model: Any, torch: Any) -> dict[str, dict[str, Any]]:
    """name -> what this rank holds of it, and which ranks should hold the same bytes."""
    dtensor_cls = getattr(loaded("torch.distributed.tensor"), "DTensor", None)
    inner, _ = unwrap(model)
    out: dict[str, dict[str, Any]] = {}
    named = [("parameter", n, t) for n, t in inner.named_parameters()]
    named += [("buffer", n, t) for n, t in inner.named_buffers()]
    for kind, name, tensor in named:
        entry: dict[str, Any] = {"kind": kind, "placements": None, "replica_of": None}
        local = tensor
        if dtensor_cls is not None and isinstance(tensor, dtensor_cls):
            placements = list(tensor.placements)
            entry["placements"] = [repr(p) for p in placements]
            coordinate = tensor.device_mesh.get_coordinate() or []
            # the same bytes as the ranks at the same coordinate on every non-Replicate dim
            entry["replica_of"] = [
                None if p.is_replicate() else int(c)
                for p, c in zip(placements, coordinate, strict=False)
            ]
            local = tensor.to_local()
        entry["value"] = tensor_stats(local, torch)
        grad = tensor.grad if kind == "parameter" else None
        if grad is not None and dtensor_cls is not None and isinstance(grad, dtensor_cls):
            grad = grad.to_local()
        entry["grad"] = tensor_stats(grad, torch) if grad is not None else None
        out[clean_name(name)] = entry
    return out


def _split(values: dict[int, Any]) -> tuple[list[int], list[int]]:
    """(agreeing, outliers): the ranks of the most common value against the rest; every
    rank is an outlier when no value is held by more than half of them."""
    counts = Counter(values.values())
    top, size = counts.most_common(1)[0]
    if size * 2 <= len(values) and len(counts) > 1:
        return [], sorted(values)
    agreeing = sorted(r for r, v in values.items() if v == top)
    return agreeing, sorted(r for r, v in values.items() if v != top)


def _relative(norms: dict[int, float | None], agreeing: list[int]) -> float | None:
    """Largest |norm - reference norm| / reference norm, the reference being the majority
    (the lowest rank when there is none)."""
    known = {r: n for r, n in norms.items() if n is not None}
    reference = [r for r in (agreeing or sorted(known)) if r in known]
    if not reference:
        return None
    base = known[reference[0]]
    diffs = [abs(n - base) for r, n in known.items() if r not in agreeing]
    return max(diffs) / max(abs(base), _TINY) if diffs else None


def _compare(name: str, ranks: dict[int, dict[str, Any]]) -> list[Divergence]:
    """The divergences of one tensor among ranks that should hold the same copy."""
    first = next(iter(ranks.values()))
    kind, found = first["kind"], []

    def add(
        what: str,
        values: dict[int, Any],
        norms: dict[int, float | None] | None = None,
        detail: str = "",
    ) -> None:
        if len(set(values.values())) <= 1:
            return
        agreeing, outliers = _split(values)
        diff = _relative(norms, agreeing) if norms else None
        found.append(Divergence(name, kind, what, outliers, agreeing, -1, diff, detail))

    value = {r: e["value"]["checksum"] for r, e in ranks.items()}
    add("value", value, {r: e["value"]["norm"] for r, e in ranks.items()})
    has_grad = {r: e["grad"] is not None for r, e in ranks.items()}
    add("grad_presence", has_grad, detail="a .grad on some ranks only")
    with_grad = {r: e["grad"] for r, e in ranks.items() if e["grad"] is not None}
    add(
        "grad",
        {r: g["checksum"] for r, g in with_grad.items()},
        {r: g["norm"] for r, g in with_grad.items()},
    )
    nonfinite = {
        r: bool(e["value"]["nonfinite"] or (e["grad"] or {}).get("nonfinite"))
        for r, e in ranks.items()
    }
    if any(nonfinite.values()):
        bad = sorted(r for r, v in nonfinite.items() if v)
        found.append(
            Divergence(
                name,
                kind,
                "nonfinite",
                bad,
                sorted(set(ranks) - set(bad)),
                -1,
                detail="NaN/Inf in the value or gradient",
            )
        )
    return found


def _verdict(gathered: dict[int, dict[str, dict[str, Any]]]) -> tuple[int, list[Divergence]]:
    names = sorted({n for tensors in gathered.values() for n in tensors})
    compared, found = 0, []
    for name in names:
        holders = {r: t[name] for r, t in gathered.items() if name in t}
        placements = {r: json.dumps(e["placements"]) for r, e in holders.items()}
        if len(set(placements.values())) > 1:
            agreeing, outliers = _split(placements)
            detail = "; ".join(
                f"rank {r}: {placements[r] if placements[r] != 'null' else 'a plain tensor'}"
                for r in sorted(placements)
            )
            kind = next(iter(holders.values()))["kind"]
            found.append(Divergence(name, kind, "placements", outliers, agreeing, -1, None, detail))
            continue
        sets: dict[str, dict[int, dict[str, Any]]] = {}
        for r, entry in holders.items():
            sets.setdefault(json.dumps(entry["replica_of"]), {})[r] = entry
        for replicas in sets.values():
            if len(replicas) > 1:
                compared += 1
                found += _compare(name, replicas)
    return compared, found


def check_replicas(
    model: Any,
    group: Any = None,
    step: int | None = None,
    write: bool = False,
    directory: str | os.PathLike[str] | None = None,
) -> ReplicaReport:
    """Compare replicated parameters, gradients and buffers across the ranks of `group`.

    Collective: every rank of the group calls it, at the same point. `step` labels the
    call (default: how many checks this process ran before). The result says, per tensor,
    which ranks diverge, by how much (relative difference of norms) and since which
    step. With `write`, the group's first rank writes it as JSON to `directory`
    (default `$TRIAGE_DUMP_DIR` or ./triage-dumps), named
    `triage-replicas-rank{r}-step{step:06d}-pid{pid}.json`.
    """
    global _steps
    torch = importlib.import_module("torch")
    dist = importlib.import_module("torch.distributed")
    step = _steps if step is None else step
    _steps += 1
    members = [int(r) for r in dist.get_process_group_ranks(group or dist.group.WORLD)]
    gathered: list[Any] = [None] * len(members)
    dist.all_gather_object(gathered, _local(model, torch), group=group)
    compared, diverging = _verdict(dict(zip(members, gathered, strict=True)))
    current = {(d.name, d.what) for d in diverging}
    for key in list(_history):
        if key not in current:  # it agreed again: a later divergence starts a new run
            del _history[key]
    for d in diverging:
        d.since_step = _history.setdefault((d.name, d.what), step)
    report = ReplicaReport(step, members, compared, diverging)
    if write and int(dist.get_rank()) == members[0]:
        name = f"{REPLICAS_PREFIX}rank{members[0]}-step{step:06d}-pid{os.getpid()}.json"
        write_atomic(dump_dir(directory) / name, json.dumps(report.to_dict()).encode())
    return report


@dataclass
class CommSummary:
    """Collectives one call issued, as CommDebugMode counted them.

    `per_op`: op name -> count; `per_module`: module path ("Global" for all) ->
    {"forward": {op: n}, "backward": {op: n}}; `table`: CommDebugMode's own module table.
    """

    total: int
    per_op: dict[str, int]
    per_module: dict[str, dict[str, dict[str, int]]]
    table: str
    result: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "result"}


def _op(op: Any) -> str:
    """`c10d_functional.all_reduce` -> all_reduce."""
    return str(op).rsplit(".", 1)[-1]


def comm_summary(fn: Any, *args: Any, **kwargs: Any) -> CommSummary:
    """Run `fn(*args, **kwargs)` under CommDebugMode; count its collectives per module.

    CommDebugMode sees collectives dispatched as torch ops (DTensor, functional
    collectives, c10d ops called from Python); DDP's reducer calls the process group from
    C++ and is not counted.
    """
    debug = importlib.import_module("torch.distributed.tensor.debug")
    mode = debug.CommDebugMode()
    with mode:
        result = fn(*args, **kwargs)
    per_op = {_op(op): int(n) for op, n in mode.get_comm_counts().items()}
    per_module = {
        str(module): {
            phase: {_op(op): int(n) for op, n in counts.items()} for phase, counts in phases.items()
        }
        for module, phases in mode.comm_module_counts.items()
    }
    table = _ANSI.sub("", str(mode.generate_comm_debug_tracing_table(noise_level=0)))
    return CommSummary(int(mode.get_total_counts()), per_op, per_module, table, result)
