"""`snapshot()`: this rank's in-process evidence, one JSON file per call.

The file has the shape of `triage.observations.ProbeSnapshot`, written with the standard
library (pydantic is not imported inside the job). Nothing here calls a collective, so a
snapshot is taken while peers hang; and every part that fails becomes one line in
`errors` instead of an exception. torch is used only when the job already imported it.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from triage.job.probe_protocol import snapshot_name
from triage.probe._common import (
    dist_module,
    dump_dir,
    flight_recorder_bytes,
    loaded,
    rank,
    write_atomic,
)
from triage.redact import redact_environment

FORMAT = "triage.probe/1"
ENV_NAMES = frozenset(
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK"}
    | {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"}
)
ENV_PREFIXES = ("MASTER_", "TORCHELASTIC_", "NCCL_", "TORCH_", "GLOO_")
#: Attributes through which wrappers hold the user's model.
WRAPPED = ("module", "_orig_mod")
WRAPPERS = frozenset(
    {
        "DistributedDataParallel",
        "DataParallel",
        "FullyShardedDataParallel",
        "OptimizedModule",
        "DeepSpeedEngine",
    }
)
#: Path components wrappers insert into parameter names.
WRAPPER_NAMES = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})
MAX_FRAMES = 200
HASH_CHUNK = 1 << 24
GPU_NOT_READ = "GPU tensors were not read while the job may be blocked in a collective"

_lock = threading.Lock()
_calls = 0
_HERE = str(Path(__file__).resolve().parent)
T = TypeVar("T")


def next_call() -> int:
    """This process's next call index (shared by direct calls and signals)."""
    global _calls
    with _lock:
        call = _calls
        _calls += 1
        return call


def file_name(rank_: int | None, call: int, suffix: str = ".json") -> str:
    return snapshot_name("x" if rank_ is None else rank_, call, os.getpid(), suffix)


class Collector:
    """One snapshot being gathered: the errors so far and the meshes seen."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.errors: list[str] = []
        self.meshes: list[dict[str, Any]] = []
        self.unread_gpu = 0

    def attempt(self, what: str, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except Exception as exc:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}".splitlines()[0][:300])
            return None

    def mesh_index(self, mesh: Any) -> int:
        record = {
            "device_type": str(mesh.device_type),
            "shape": [int(n) for n in mesh.shape],
            "dim_names": list(mesh.mesh_dim_names) if mesh.mesh_dim_names else None,
            "ranks": [int(r) for r in mesh.mesh.flatten().tolist()],
        }
        if record not in self.meshes:
            self.meshes.append(record)
        return self.meshes.index(record)


# -- the model -------------------------------------------------------------------------------


def unwrap(model: Any) -> tuple[Any, list[str]]:
    """The user's module inside DDP / FSDP / torch.compile, and the wrappers' class names."""
    wrappers: list[str] = []
    while True:
        mro = {cls.__name__ for cls in type(model).__mro__}
        if "FSDPModule" in mro and "FSDPModule" not in wrappers:  # fully_shard: in place
            wrappers.append("FSDPModule")
        name = type(model).__name__
        inner = next((getattr(model, a) for a in WRAPPED if hasattr(model, a)), None)
        if name not in WRAPPERS or inner is None or inner is model:
            return model, wrappers
        wrappers.append(name)
        model = inner


def clean_name(name: str) -> str:
    return ".".join(part for part in name.split(".") if part not in WRAPPER_NAMES)


def _hash(local: Any) -> str:
    """blake2b (16 bytes) of the tensor's bytes, read straight from CPU memory in chunks."""
    flat = local.detach().contiguous()  # data_ptr() is its first element, even in a view
    size = flat.numel() * flat.element_size()
    digest = hashlib.blake2b(digest_size=16)
    address = flat.data_ptr()
    for start in range(0, size, HASH_CHUNK):
        digest.update(ctypes.string_at(address + start, min(HASH_CHUNK, size - start)))
    return digest.hexdigest()


def tensor_stats(tensor: Any, torch: Any) -> dict[str, Any]:
    """checksum, float64 sum and norm, count of NaN/Inf of one (local) tensor."""
    local = tensor.detach().to("cpu")
    values = torch.view_as_real(local) if local.is_complex() else local
    nonfinite = 0
    if values.is_floating_point():
        nonfinite = int(values.numel() - int(torch.isfinite(values).sum().item()))
    as_float = values if values.is_floating_point() else values.to(torch.float64)
    stats: dict[str, Any] = {"checksum": _hash(local), "sum": None, "norm": None}
    if nonfinite == 0:  # JSON has no NaN: `nonfinite` says why sum and norm are missing
        stats["sum"] = float(torch.sum(as_float, dtype=torch.float64).item())
        stats["norm"] = float(torch.linalg.vector_norm(as_float, dtype=torch.float64).item())
    stats["nonfinite"] = nonfinite
    return stats


def _readable(tensor: Any, found: Collector) -> bool:
    """On the signal path a GPU tensor is never read: its stream may be the stuck one."""
    if found.reason == "signal" and tensor.device.type != "cpu":
        found.unread_gpu += 1
        return False
    return True


def tensor_record(
    name: str, kind: str, tensor: Any, found: Collector, torch: Any
) -> dict[str, Any]:
    dtensor_cls = getattr(loaded("torch.distributed.tensor"), "DTensor", None)
    is_dtensor = dtensor_cls is not None and isinstance(tensor, dtensor_cls)
    local = tensor.to_local() if is_dtensor else tensor
    record: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "shape": [int(n) for n in tensor.shape],
        "local_shape": [int(n) for n in local.shape] if is_dtensor else None,
        "dtype": str(tensor.dtype),
        "device": str(tensor.device),
        "requires_grad": bool(tensor.requires_grad),
        "placements": [repr(p) for p in tensor.placements] if is_dtensor else None,
        "mesh": found.attempt(f"{name}: mesh", found.mesh_index, tensor.device_mesh)
        if is_dtensor
        else None,
        "value": None,
        "grad": None,
    }
    if _readable(local, found):
        record["value"] = found.attempt(f"{name}: value", tensor_stats, local, torch)
    grad = tensor.grad if kind == "parameter" else None
    if grad is not None:
        grad_local = grad.to_local() if hasattr(grad, "to_local") else grad
        if _readable(grad_local, found):
            record["grad"] = found.attempt(f"{name}: grad", tensor_stats, grad_local, torch)
    return record


def tensors(model: Any, found: Collector, torch: Any) -> list[dict[str, Any]]:
    """Every parameter, then every buffer; one that cannot be described is left out."""
    named = [("parameter", n, t) for n, t in model.named_parameters()]
    named += [("buffer", n, t) for n, t in model.named_buffers()]
    records = []
    for kind, name, tensor in named:
        record = found.attempt(name, tensor_record, clean_name(name), kind, tensor, found, torch)
        if record is not None:
            records.append(record)
    return records


def _plain(value: Any) -> Any:
    """A hyperparameter as JSON: numbers, strings, lists of them; tensors as numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # strict JSON has no inf
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "numel") and value.numel() == 1:
        return float(value.item())
    return type(value).__name__


def optimizer_record(optimizer: Any) -> dict[str, Any]:
    groups = [
        {"params": len(group["params"])} | {k: _plain(v) for k, v in group.items() if k != "params"}
        for group in optimizer.param_groups
    ]
    tensors_, size = 0, 0
    for state in optimizer.state.values():
        for value in state.values():
            if hasattr(value, "element_size"):
                tensors_ += 1
                size += int(value.numel() * value.element_size())
    return {
        "class": type(optimizer).__name__,
        "param_groups": groups,
        "state_tensors": tensors_,
        "state_bytes": size,
    }


# -- the job around it -----------------------------------------------------------------------


def groups() -> list[dict[str, Any]]:
    """Every process group this rank knows, with its global ranks (no collective needed)."""
    dist = dist_module()
    if dist is None:
        return []
    c10d = loaded("torch.distributed.distributed_c10d")
    world = c10d._world if c10d is not None else None
    if world is None:
        return []
    names = world.pg_names
    out = []
    for pg, ranks in list(world.pg_group_ranks.items()):
        backend = None
        with contextlib.suppress(Exception):
            backend = str(dist.get_backend(pg))
        out.append(
            {
                "name": str(names.get(pg, "")),
                "ranks": sorted(int(r) for r in ranks),
                "backend": backend,
                "description": getattr(pg, "group_desc", None),
            }
        )
    return out


def context_meshes(found: Collector) -> None:
    """Meshes torch holds in its registry (the `with mesh:` stack), if this torch has it."""
    module = loaded("torch.distributed.device_mesh")
    resources = getattr(module, "_mesh_resources", None)
    for mesh in list(getattr(resources, "mesh_stack", None) or []):
        found.mesh_index(mesh)


def cuda_memory() -> dict[str, int] | None:
    """memory_stats() of this rank's device; None unless the job initialised CUDA."""
    cuda = loaded("torch.cuda")
    if cuda is None or not cuda.is_initialized():
        return None
    stats = cuda.memory_stats(cuda.current_device())
    return {str(k): int(v) for k, v in stats.items() if isinstance(v, int | float)}


def _frames(frame: Any) -> Iterator[dict[str, Any]]:
    while frame is not None:
        code = frame.f_code
        yield {"function": code.co_name, "file": code.co_filename, "line": frame.f_lineno}
        frame = frame.f_back


def stacks() -> list[dict[str, Any]]:
    """Every thread's Python stack, innermost first; the probe's own calls left out."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    out = []
    for ident, frame in sys._current_frames().items():
        frames = list(_frames(frame))
        while ident == me and frames and frames[0]["file"].startswith(_HERE):
            frames.pop(0)
        thread = names.get(ident, "?")
        out.append({"thread": thread, "thread_id": ident, "frames": frames[:MAX_FRAMES]})
    return out


def environment() -> dict[str, str]:
    chosen = {k: v for k, v in os.environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}
    return redact_environment(dict(sorted(chosen.items())))


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def identity(found: Collector) -> dict[str, Any]:
    dist = dist_module()
    world, backend = _int_env("WORLD_SIZE"), None
    if dist is not None:
        world = found.attempt("world size", lambda: int(dist.get_world_size())) or world
        backend = found.attempt("backend", lambda: str(dist.get_backend()))
    local_rank = _int_env("LOCAL_RANK")
    return {"rank": rank(), "world_size": world, "local_rank": local_rank, "backend": backend}


# -- the file --------------------------------------------------------------------------------


def take(
    model: Any = None,
    optimizer: Any = None,
    tag: str | None = None,
    reason: str = "call",
    directory: str | os.PathLike[str] | None = None,
    flight_recorder: Path | bool = False,
) -> Path | None:
    """Gather and write one snapshot; the file's path, or None when it could not be written.

    `flight_recorder`: a dump already taken for this snapshot (the signal path's), recorded
    by its path relative to the snapshot's folder; True takes one beside the snapshot.
    """
    found = Collector(reason)
    call = next_call()
    data: dict[str, Any] = {"format": FORMAT, **identity(found)}
    data |= {"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}
    data |= {"call": call, "tag": tag, "reason": reason, "model": None, "wrappers": []}
    torch = loaded("torch")
    data["groups"] = found.attempt("process groups", groups) or []
    records: list[dict[str, Any]] = []
    inner, data["wrappers"] = found.attempt("model", unwrap, model) or (None, [])
    if inner is not None:
        data["model"] = type(inner).__name__
        if torch is None:
            found.errors.append("torch is not loaded: the model's tensors were not read")
        else:
            records = found.attempt("model tensors", tensors, inner, found, torch) or []
    found.attempt("device meshes", context_meshes, found)
    data["meshes"], data["tensors"] = found.meshes, records
    if optimizer is not None:
        data["optimizer"] = found.attempt("optimizer", optimizer_record, optimizer)
    data["cuda_memory"] = found.attempt("CUDA memory", cuda_memory)
    folder = dump_dir(directory)
    data["flight_recorder"] = None
    if isinstance(flight_recorder, Path):
        data["flight_recorder"] = os.path.relpath(flight_recorder, folder)
    elif flight_recorder:
        beside = file_name(data["rank"], call, ".fr.pickle")
        data["flight_recorder"] = found.attempt("Flight Recorder", _flight_recorder, folder, beside)
    data["stacks"] = found.attempt("stacks", stacks) or []
    data["environment"] = found.attempt("environment", environment) or {}
    if found.unread_gpu:
        found.errors.append(f"{GPU_NOT_READ}: {found.unread_gpu} tensors without content stats")
    data["errors"] = found.errors
    target = folder / file_name(data["rank"], call)
    try:
        text = json.dumps(data, allow_nan=False, default=str)
        return write_atomic(target, text.encode())
    except Exception as exc:  # the one failure with nowhere else to go
        print(f"triage.probe: snapshot not written to {target}: {exc}", file=sys.stderr)
        return None


def _flight_recorder(folder: Path, name: str) -> str | None:
    """The recorder beside the snapshot, when the job runs torch.distributed."""
    if dist_module() is None:
        return None
    data = flight_recorder_bytes()
    if data is None:
        return None
    return write_atomic(folder / name, data).name
