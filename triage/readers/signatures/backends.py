"""What a backend (and a wrapper built on one) can serve: the devices, dtypes, layouts and
operations each refuses in its own words, and the host it needs (a GPU, a backend for the
accelerator it found). Each names a mismatch between the job's tensors or host and the
backend it chose."""

from __future__ import annotations

from triage.readers.signatures import first_of, signature

# A CPU-only build of torch asked for CUDA: no backend of this build serves the GPU.
signature(
    "setup.cpu_only_build",
    r"Torch not compiled with CUDA enabled",
    anchors="Torch not compiled with CUDA enabled",
    summary="this torch is a CPU-only build: CUDA (and NCCL) are not in it",
)

# No GPU is usable in this process at all: the driver is not loaded or not passed into the
# container (torch's `Found no NVIDIA driver on your system`, nvidia-smi's `couldn't
# communicate with the NVIDIA driver`, Docker's `could not select device driver "" with
# capabilities: [[gpu]]`), or a checkpoint of CUDA tensors loaded where CUDA is not available.
signature(
    "setup.no_gpu_usable",
    r"Found no NVIDIA driver on your system|couldn't communicate with the NVIDIA driver"
    r"|CUDA driver initialization failed, you might not have a CUDA gpu"
    r'|could not select device driver "" with capabilities: \[\[gpu\]\]'
    # the NVIDIA container runtime's hook, on a host whose driver is not loaded
    r"|nvidia-container-cli: initialization error: (?:nvml error: )?driver not loaded"
    r"|deserialize object on a CUDA device but torch\.cuda\.is_available\(\) is False"
    # Kubernetes' NVIDIA device plugin on a node whose driver it cannot load (the node then
    # offers no nvidia.com/gpu)
    r"|Failed to (?:initialize|start) (?:NVML|nvml)(?: with error)?:\s+could not load NVML library"
    # NCCL in a container the driver's libcuda was not mounted into
    r"|Failed to find CUDA library libcuda\.so",
    anchors=(
        "Found no NVIDIA driver on your system",
        "couldn't communicate with the NVIDIA driver",
        "CUDA driver initialization failed",
        "with capabilities: [[gpu]]",
        "nvidia-container-cli: initialization error",
        "torch.cuda.is_available() is False",
        "could not load NVML library",
        "Failed to find CUDA library libcuda.so",
    ),
    summary="no GPU is usable in this process: no driver loaded, or none passed to the container",
)

signature(
    "setup.backend_unavailable",
    r"ProcessGroupNCCL is only supported with GPUs, no GPUs found"
    r"|\bnccl2? requires at least one CUDA device"
    # the message, or torch's source line raising it, shown in a traceback (two literals)
    # (some builds misspell it `bulit in`)
    r"""|Distributed package doesn't have (?P<backend>NCCL|MPI|UCC|Gloo|XCCL)(?: " "| )bu(?:il|li)t in"""
    # a backend name this build does not know (`Unknown c10d backend type MPI`), and Lightning
    # refusing DDP on Apple's GPUs
    r"|Unknown c10d backend type (?P<unknown>\w+)"
    r"|strategies from the DDP family are not supported on the MPS accelerator",
    anchors=(
        "ProcessGroupNCCL is only supported with GPUs",
        "requires at least one CUDA device",
        "Distributed package doesn't have",
        "Unknown c10d backend type",
        "DDP family are not supported on the MPS accelerator",
    ),
    summary="the chosen backend cannot run here (NCCL without a GPU, a backend missing from this build)",
)

# monitored_barrier and TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper run their checks on gloo,
# and DCP's async_save its staging: on a group without a CPU backend torch refuses them.
signature(
    "setup.needs_gloo",
    r"monitored_barrier requires a group with a CPU-capable backend"
    r"|ProcessGroupWrapper unsupported without GLOO backend"
    # torch.distributed.checkpoint's async_save stages on the CPU
    r"|A CPU backend must be enabled for async save"
    # vLLM under an external launcher (torchrun) needs gloo beside NCCL for its CPU groups
    r"|initialized the default process group without a CPU \(gloo\) backend",
    anchors=(
        "monitored_barrier requires a group with a CPU-capable backend",
        "ProcessGroupWrapper unsupported without GLOO backend",
        "A CPU backend must be enabled for async save",
        "without a CPU (gloo) backend",
    ),
    summary="monitored_barrier, the DETAIL debug wrapper or async_save met a group without gloo",
)

signature(
    "setup.no_backend_for_device",
    r"No backend type associated with device type (?P<device>\w+)"
    r"|Default backend not registered for device : (?P<default_device>\w+)",
    anchors=("No backend type associated with device type", "Default backend not registered"),
    summary="a collective got a tensor on a device none of the group's backends serves (CPU tensor on NCCL)",
)

signature(
    "setup.tensor_device",
    # the other device backends' (XCCL, HCCL) say their own device: `Tensors must be XPU and dense`
    r"Tensors? must be (?:CUDA|XPU|NPU|HPU) and dense",
    anchors=(
        "must be CUDA and dense",
        "must be XPU and dense",
        "must be NPU and dense",
        "must be HPU and dense",
    ),
    summary="NCCL was given a CPU (or sparse) tensor",
)

# c10d's check on every collective's tensors (NCCL and gloo): a view (a transposed or
# strided slice) cannot be handed to the backend as it is.
signature(
    "setup.tensor_not_contiguous",
    r"Tensors? must be contiguous",
    anchors="must be contiguous",
    summary="a collective was given a non-contiguous tensor (a transposed or strided view)",
)

signature(
    "setup.backend_op_unsupported",
    r"\b(?:ProcessGroup ?(?P<group>\w*?)|Backend (?P<backend>\w+)) ?does not support (?P<op>\w+)\b"
    # DTensor's warning when it runs the op another way (`... reduce_scatter, falling back
    # with all reduce!`) is no failure
    r"(?!,? falling back)"
    # the device backends' own words: `scatter is currently not supported with HCCL`,
    # `broadcast isn't implemented on backend [xpu]`
    r"|\b(?P<op2>\w+) is currently not supported with (?P<backend2>HCCL|XCCL|HCCL backend)"
    r"|\b(?P<op3>\w+) isn't implemented on backend \[(?P<backend3>\w+)\]"
    # an argument of the call the backend does not take (barrier's device_ids on gloo)
    r"|Function argument (?P<argument>\w+) not supported for the selected backend (?P<backend4>\w+)",
    anchors=(
        "does not support",
        "is currently not supported with",
        "isn't implemented on backend",
        "not supported for the selected backend",
    ),
    summary="the process group's backend does not implement this collective",
    extract=first_of(
        op=("op", "op2", "op3", "argument"),
        backend=("backend", "backend2", "backend3", "backend4"),
    ),
)

signature(
    "setup.gloo_device_unsupported",
    r"ProcessGroupGloo::(?P<op>\w+): unsupported (?:device type (?P<device>\w+)|layout)",
    anchors="ProcessGroupGloo::",
    summary="gloo cannot run this collective on this device or tensor layout",
)

signature(
    "setup.reduce_op_unsupported",
    r"Cannot use ReduceOp\.(?P<op>\w+) with (?P<backend>Gloo|NCCL|MPI|UCC)"
    # a vendor backend's wording (SageMaker's SMDDP): `SMDDP does not support: ReduceOp`
    r"|(?P<vendor>\w+) does not support:? ReduceOp",
    anchors=("Cannot use ReduceOp.", "does not support: ReduceOp", "does not support ReduceOp"),
    summary="the backend does not implement this reduction",
)

# ProcessGroupNCCL's checks of an op against the NCCL it loaded and the tensor's type:
# `AVG requires NCCL 2.10+`, `PreMulSum requires NCCL>=2.11.1`, `Capturing NCCL collectives
# is only allowed with NCCL >= 2.9.6`, `Cannot use ReduceOp.AVG with boolean inputs`,
# `all_reduce does not support MAX on complex tensors`, `Unsupported Float8 type for NCCL
# reduction`.
signature(
    "setup.nccl_lacks_op",
    r"(?P<op>AVG|PreMulSum|\w+\(\)) requires NCCL ?(?:>=)? ?(?P<needed>\d[\d.]*)"
    r"|Capturing NCCL collectives is only allowed with NCCL >= (?P<capture>[\d.]+)"
    r"|Cannot use ReduceOp\.(?P<bool_op>\w+) with boolean inputs"
    r"|(?P<coll>\w+) does not support ?(?P<complex_op>\w+?) ?on complex tensors"
    r"|Unsupported Float8 type for NCCL reduction"
    r"|ProcessGroupNCCL only supports (?P<p2p>\w+) for NCCL lib version >= (?P<lib>[\d.]+)",
    anchors=(
        " requires NCCL",
        "Capturing NCCL collectives is only allowed",
        "with boolean inputs",
        "on complex tensors",
        "Unsupported Float8 type for NCCL",
        "for NCCL lib version >=",
    ),
    summary="the NCCL this job loads has no form of this reduction (too old, or the dtype)",
)

# ProcessGroupNCCL's dtype table: NCCL has no type for it (unsigned 16/32/64-bit integers,
# float8 before NCCL 2.24, bfloat16 before 2.10).
signature(
    "setup.backend_dtype_unsupported",
    r"Input tensor data type is not supported for (?P<backend>NCCL|UCC|\w+) process group:?"
    r" ?(?P<dtype>[\w:.]+)?",
    anchors="data type is not supported for",
    summary="the backend has no data type for the tensor's dtype",
)

# ProcessGroupNCCL's sparse path covers all_reduce only, through a dense all_gather.
signature(
    "setup.backend_sparse_unsupported",
    r"(?P<backend>NCCL|Gloo|UCC) does not support (?P<op>\w+) with sparse tensors",
    anchors="with sparse tensors",
    summary="the backend cannot run this collective on sparse tensors",
)

# A wrapper that shards over an accelerator started where none is usable: FSDP's device
# handle (torch 2.4+ at construction, earlier at the first forward).
signature(
    "setup.wrapper_needs_accelerator",
    r"(?P<wrapper>FSDP) needs a non-CPU accelerator device, but no accelerator device is detected"
    r"|(?P<old>FSDP) does not support CPU only execution",
    anchors=("needs a non-CPU accelerator device", "does not support CPU only execution"),
    summary="FSDP was started where no GPU (accelerator) is usable",
)

# init_process_group without a backend on an accelerator torch has no default backend for
# (an out-of-tree device, an XPU build without XCCL).
signature(
    "setup.accelerator_without_backend",
    r"We detected accelerator (?P<accelerator>\S+) on your machine\. But we don't know which"
    r" communication backend to use",
    anchors="But we don't know which communication backend to use",
    summary="init_process_group found an accelerator it knows no default backend for",
)
