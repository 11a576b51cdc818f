"""config.backend_device from logs: the process group's backend cannot serve the tensor's
device or the requested operation."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import quoted_finding
from triage.rules.logs._signals import Found, collective_of, signals, tracebacks

_TEXT = re.compile(r"backend|Backend|does not support|ProcessGroup|CUDA|device|ReduceOp|nccl")

_FIX_DEVICE = (
    "Match tensors to the backend: NCCL needs CUDA tensors (move them with .cuda() / "
    ".to(f'cuda:{local_rank}') before the collective), gloo serves CPU tensors; for both, "
    "init_process_group(backend='cpu:gloo,cuda:nccl'), or a separate gloo group "
    "(dist.new_group(backend='gloo')) for CPU-side collectives."
)
_FIX_UNAVAILABLE = (
    "Use a backend this machine has: gloo on CPU-only hosts, Windows and macOS (NCCL needs "
    "Linux and a CUDA GPU); check torch.cuda.is_available() and pick the backend from it "
    "(or dist.get_default_backend_for_device)."
)
_FIX_CPU_ONLY = (
    "Install the CUDA build of torch that matches the driver (the cuXXX wheel from the"
    " PyTorch index, `python -c 'import torch; print(torch.version.cuda)'` must not print"
    " None), or run on the CPU with gloo."
)
_FIX_OP = (
    "Use an operation the backend implements (the support table in the torch.distributed "
    "docs): e.g. all_reduce + slice instead of reduce_scatter on old gloo, all_gather instead "
    "of gather on old NCCL, SUM then divide instead of AVG/PREMUL_SUM on gloo; or run that "
    "collective on a group of the other backend, or upgrade torch."
)


@rule("logs.backend_device", "config.backend_device")
def backend_device(evidence: EvidenceSet) -> Iterator[Finding]:
    """A collective's backend cannot handle the tensor's device or the operation asked of it.

    What it detects:
    `ProcessGroupNCCL is only supported with GPUs, no GPUs found!`, `nccl requires at least
    one CUDA device`, `Distributed package doesn't have NCCL built in`; `No backend type
    associated with device type cpu` and `Tensors must be CUDA and dense` (CPU tensors on
    an NCCL group); `ProcessGroupGloo does not support reduce_scatter`, `Backend gloo does
    not support ...`, `ProcessGroupGloo::<op>: unsupported device type`, `Cannot use
    ReduceOp.PREMUL_SUM with Gloo`; `SyncBatchNorm expected input tensor to be on GPU` (0.75);
    c10d's `Tensors must be contiguous` raised in a
    collective (0.7: a transposed or strided view handed to it; custom kernels raise the same
    words and are not read); weaker (0.6), `Torch not compiled with CUDA enabled`
    (a CPU-only build of torch asked for the GPU).

    Why it happens:
    The backend is chosen for one device and the tensors live on another (metrics or
    objects kept on CPU in an NCCL job), the script picks NCCL on a machine without a GPU
    or on Windows/macOS, or the backend (or this torch version of it) lacks the op.

    Evidence:
    The error text naming the backend, the device or the op; the user line of the call.

    Fix:
    Move tensors to the backend's device, use `cpu:gloo,cuda:nccl` or a gloo subgroup for
    CPU collectives, pick gloo where there is no GPU, or use a supported op.

    Known false positives:
    None known: these messages are specific.

    References:
    torch.distributed docs, "Backends" (the op/device support table) and
    init_process_group's `backend` argument.
    """
    found: list[Found] = []
    unavailable = signals(evidence, "setup.backend_unavailable")
    if unavailable:
        found.append(
            (0.9, "the backend is not available on this machine", unavailable, _FIX_UNAVAILABLE)
        )
    cpu_only = signals(evidence, "setup.cpu_only_build")
    if cpu_only and not unavailable:
        found.append((0.6, "this torch is a CPU-only build", cpu_only, _FIX_CPU_ONLY))
    device = signals(evidence, "setup.no_backend_for_device", "setup.tensor_device")
    if device:
        kind = next(
            (
                str(s.fields.get("device") or s.fields.get("default_device"))
                for _, s in device
                if s.fields.get("device") or s.fields.get("default_device")
            ),
            "cpu",
        )
        found.append(
            (
                0.88,
                f"a collective got a {kind} tensor its group's backend cannot serve",
                device,
                _FIX_DEVICE,
            )
        )
    ops = signals(
        evidence,
        "setup.backend_op_unsupported",
        "setup.gloo_device_unsupported",
        "setup.reduce_op_unsupported",
    )
    if ops:
        op = next((str(s.fields["op"]) for _, s in ops if s.fields.get("op")), "the operation")
        found.append((0.86, f"the backend does not support {op}", ops, _FIX_OP))
    syncbn = signals(evidence, "setup.syncbn_off_gpu")
    if syncbn:
        found.append(
            (
                0.75,
                "SyncBatchNorm got a CPU batch: it synchronises its statistics on GPUs only",
                syncbn,
                "Run SyncBatchNorm on the rank's GPU (the model and the batch .to(local_rank)), or"
                " keep plain BatchNorm for a CPU run (convert_sync_batchnorm only on GPU"
                " launches).",
            )
        )
    strided = signals(evidence, "setup.tensor_not_contiguous")
    if strided and _in_a_collective(evidence, "must be contiguous"):
        found.append(
            (
                0.7,
                "a collective got a non-contiguous tensor (a transposed or strided view)",
                strided,
                "Hand collectives contiguous tensors: `t = t.contiguous()` before the call (and"
                " copy the result back into the view if it was meant to be updated in place), or"
                " build the buffer contiguous (torch.empty(...), then copy the slice in).",
            )
        )
    if not found:
        return
    yield quoted_finding(
        evidence,
        found,
        _TEXT,
        "the failing call's tensor device (tensor.device) or op is not in the backend's "
        "support table for the group it runs on",
    )


def _in_a_collective(evidence: EvidenceSet, words: str) -> bool:
    """A traceback with these words raised inside torch.distributed's collectives: custom
    kernels and Triton ops raise the same words about their own inputs."""
    return any(
        words in record.message and collective_of(record) is not None
        for _, record in tracebacks(evidence)
    )
