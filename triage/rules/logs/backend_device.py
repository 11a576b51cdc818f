"""config.backend_device from logs: the process group's backend cannot serve the tensor's
device or the requested operation."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import quoted_finding
from triage.rules.logs._signals import Found, collective_of, signals, tracebacks

_TEXT = re.compile(
    r"backend|Backend|does not support|ProcessGroup|CUDA|device|ReduceOp|nccl|FSDP|data type"
)

_FIX_DEVICE = (
    "Match tensors to the backend: NCCL needs CUDA tensors (move them with .cuda() / "
    ".to(f'cuda:{local_rank}') before the collective), gloo serves CPU tensors; for both, "
    "init_process_group(backend='cpu:gloo,cuda:nccl'), or a separate gloo group "
    "(dist.new_group(backend='gloo')) for CPU-side collectives."
)
_FIX_HOROVOD_BUILD = (
    "Reinstall Horovod with what the job uses built in (`HOROVOD_WITH_PYTORCH=1"
    " HOROVOD_WITH_GLOO=1` or `HOROVOD_WITH_MPI=1`, `HOROVOD_GPU_OPERATIONS=NCCL`, and `pip"
    " install --no-cache-dir horovod` so the build runs again); `horovodrun --check-build` lists"
    " what the installed one has."
)
_FIX_GLOO = (
    "monitored_barrier, TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper and DCP's async_save run on"
    " gloo: give the process group a CPU backend too (init_process_group(backend='cuda:nccl,cpu:gloo')), or"
    " pass monitored_barrier a gloo group of its own (dist.new_group(backend='gloo'))."
)
_FIX_UNAVAILABLE = (
    "Use a backend this machine has: gloo on CPU-only hosts, Windows and macOS (NCCL needs "
    "Linux and a CUDA GPU); check torch.cuda.is_available() and pick the backend from it "
    "(or dist.get_default_backend_for_device)."
)
_FIX_NO_GPU = (
    "Give the process its GPUs: `nvidia-smi` on the host must list them (the driver loaded);"
    " a container needs them passed in (`docker run --gpus all` with the NVIDIA container"
    " toolkit, a Kubernetes pod its nvidia.com/gpu request); CUDA_VISIBLE_DEVICES must not be"
    " empty. A job meant for the CPU: gloo, and torch.load(..., map_location='cpu')."
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
_FIX_SPARSE = (
    "Densify before the collective (`t.to_dense()`, or a dense gradient: nn.Embedding(...,"
    " sparse=False) under DDP on NCCL), or run the sparse all_reduce on a gloo group"
    " (dist.new_group(backend='gloo')) with the tensor on the CPU."
)
_FIX_DTYPE = (
    "Cast to a dtype the backend has before the collective and back after it (unsigned 16/32/64"
    "-bit integers to int64, float8 to bfloat16 or uint8 bytes; a bool mask to uint8), or use a"
    " newer NCCL (bfloat16 needs 2.10, float8 2.24: `torch.cuda.nccl.version()`)."
)
_FIX_ACCELERATOR = (
    "Name the backend for the device: init_process_group(backend=...) with the one that"
    " accelerator ships (xccl for Intel XPU in torch 2.8+, hccl for Gaudi, the vendor plugin's"
    " name for out-of-tree devices, imported before the call), or gloo for a CPU-only run."
)


@rule("logs.backend_device", "config.backend_device")
def backend_device(evidence: EvidenceSet) -> Iterator[Finding]:
    """A collective's backend cannot handle the tensor's device or the operation asked of it.

    What it detects:
    `ProcessGroupNCCL is only supported with GPUs, no GPUs found!`, `nccl requires at least
    one CUDA device`, `Distributed package doesn't have NCCL built in`, `Unknown c10d backend
    type MPI`, Lightning's `strategies from the DDP family are not supported on the MPS
    accelerator`; `monitored_barrier
    requires a group with a CPU-capable backend` and `ProcessGroupWrapper unsupported without
    GLOO backend`, `A CPU backend must be enabled for async save` (0.85: work that runs on
    gloo, on a group without it); no GPU usable at all
    (0.7: `Found no NVIDIA driver on your system`, `couldn't communicate with the NVIDIA
    driver`, Docker's `could not select device driver "" with capabilities: [[gpu]]`, CUDA
    tensors deserialized where `torch.cuda.is_available() is False`); `No backend type
    associated with device type cpu` and `Tensors must be CUDA and dense` (CPU tensors on
    an NCCL group; XCCL's and HCCL's `must be XPU and dense`); `ProcessGroupGloo does not
    support reduce_scatter`, `Backend gloo does not support ...`, HCCL's `scatter is
    currently not supported with HCCL`, XCCL's `broadcast isn't implemented on backend [xpu]`,
    `Function argument device_ids not supported for the selected backend gloo`, `ProcessGroupGloo::<op>: unsupported device type`, `Cannot use
    ReduceOp.PREMUL_SUM with Gloo`, `NCCL does not support all_reduce with sparse tensors`
    (0.85); `Input tensor data type is not supported for NCCL process group: UInt32` and
    NCCL's `FP8 reduction support begins with sm90 capable devices` (0.8); ProcessGroupNCCL's
    `AVG requires NCCL 2.10+`, `Cannot use ReduceOp.AVG with boolean inputs`, `all_reduce
    does not support MAX on complex tensors` (0.75);
    FSDP's `FSDP needs a non-CPU accelerator device, but no accelerator device is detected`
    (0.85); init_process_group's `We detected accelerator xpu on your machine. But we don't
    know which communication backend to use` (0.8);
    `SyncBatchNorm expected input tensor to be on GPU` (0.75);
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
    horovod = signals(evidence, "horovod.not_built")
    if horovod:
        part = horovod[0][1].fields["part"]
        what = f"Horovod was built without {part}"
        found.append((0.85, what, horovod, _FIX_HOROVOD_BUILD))
    dtypes = signals(evidence, "horovod.dtype_unsupported")
    if dtypes:
        fields = dtypes[0][1].fields
        what = f"Horovod's {fields['backend']} backend cannot reduce {fields['dtype']} tensors"
        found.append((0.8, what, dtypes, _FIX_DTYPE))
    gloo = signals(evidence, "setup.needs_gloo")
    if gloo:
        found.append((0.85, "a check that runs on gloo met a group without it", gloo, _FIX_GLOO))
    no_gpu = signals(evidence, "setup.no_gpu_usable")
    if no_gpu:
        found.append((0.7, "no GPU is usable in this process", no_gpu, _FIX_NO_GPU))
    wrapper = signals(evidence, "setup.wrapper_needs_accelerator")
    if wrapper:
        found.append((0.85, "FSDP was started where no GPU is usable", wrapper, _FIX_UNAVAILABLE))
    accelerator = signals(evidence, "setup.accelerator_without_backend")
    if accelerator:
        name = accelerator[0][1].fields["accelerator"].strip(".")
        found.append(
            (
                0.8,
                f"init_process_group knows no default backend for the {name} accelerator",
                accelerator,
                _FIX_ACCELERATOR,
            )
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
    sparse = signals(evidence, "setup.backend_sparse_unsupported")
    if sparse:
        fields = sparse[0][1].fields
        what = f"{fields['backend']} does not support {fields['op']} on sparse tensors"
        found.append((0.85, what, sparse, _FIX_SPARSE))
    lacks = signals(evidence, "setup.nccl_lacks_op")
    if lacks:
        what = "the NCCL this job loads has no form of this reduction (too old, or the dtype)"
        found.append((0.75, what, lacks, _FIX_OP))
    fp8 = signals(evidence, "nccl.fp8_reduction_needs_sm90")
    if fp8:
        what = "NCCL reduces float8 only on Hopper (sm90) or newer GPUs"
        found.append((0.8, what, fp8, _FIX_DTYPE))
    dtype = signals(evidence, "setup.backend_dtype_unsupported")
    if dtype:
        fields = dtype[0][1].fields
        named = f" ({fields['dtype']})" if fields.get("dtype") else ""
        what = f"{fields['backend']} has no data type for the tensor's dtype{named}"
        found.append((0.8, what, dtype, _FIX_DTYPE))
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
