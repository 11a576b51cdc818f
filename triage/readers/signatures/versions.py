"""Versions and drivers that do not fit each other: NCCL's releases across ranks, the
driver against the CUDA build, the CUDA build against the GPU, a loaded library another
than the one torch was built against, Ray's cluster against the job's environment
(comm.version_mismatch)."""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "driver.insufficient",
    r"CUDA driver version is insufficient for CUDA runtime version",
    anchors="CUDA driver version is insufficient",
    summary="the NVIDIA driver is older than the CUDA runtime that NCCL/torch were built with",
)

# Ray refuses a process whose Ray or Python version differs from the running cluster's
# (`Version mismatch: The cluster was started with:` then the versions on the next lines).
signature(
    "ray.version_mismatch",
    r"Version mismatch: The cluster was started with:?",
    anchors="Version mismatch: The cluster was started with",
    summary="Ray: this process's Ray or Python version differs from the running cluster's",
)

# NCCL refuses CUDA-graph capture when its own build's CUDA runtime or the driver is too
# old for it (strongstream.cc): a wheel built for an older CUDA than torch's, or an old driver.
signature(
    "nccl.graph_capture_unsupported",
    r"NCCL cannot be captured in a graph if either it wasn't built with CUDA runtime",
    anchors="NCCL cannot be captured in a graph",
    summary="NCCL cannot be captured in a CUDA graph: its build's CUDA runtime or the driver is too old",
)

signature(
    "driver.too_old",
    r"NVIDIA driver on your system is too old(?: \(found version (?P<found>\d+)\))?",
    anchors="NVIDIA driver on your system is too old",
    summary="torch reports the NVIDIA driver too old for its CUDA build",
)

# The CUDA stack below torch does not fit the GPU or the driver, in CUDA's and torch's words:
# kernels not built for this GPU (`no kernel image is available`, torch's `with CUDA
# capability sm_120 is not compatible with the current PyTorch installation`, ROCm's
# `hipErrorNoBinaryForGpu` and `HIP error: invalid device function`), code compiled
# by a newer toolkit than the driver supports (`the provided PTX was compiled with an
# unsupported toolchain`), a user-mode driver that differs from the kernel module (Error
# 803, common in containers) or forward compatibility on a GPU without it (Error 804), a
# cuDNN other than the one torch was built against, NVML's `Driver/library version mismatch`
# (the kernel module and the user-space driver of two releases: an upgrade without a
# reboot, a container's driver libraries). NCCL's own `Cuda failure 'no kernel
# image ...'` is nccl.cuda_arch_missing.
signature(
    "cuda.build_mismatch",
    r"(?P<what>(?P<arch>no kernel image is available for execution on the device"
    r"|with CUDA capability sm_\w+ is not compatible with the current PyTorch installation"
    # ROCm's: the build has no code object for this GPU's gfx target
    r"|hipErrorNoBinaryForGpu|HIP error: invalid device function)"
    r"|(?P<driver>the provided PTX was compiled with an unsupported toolchain"
    r"|unsupported display driver / cuda driver combination"
    r"|forward compatibility was attempted on non supported HW)"
    r"|cuDNN version incompatibility: PyTorch was compiled\s+against \([\d, ]+\) but found "
    r"runtime version \([\d, ]+\)"
    r"|(?P<module>[Dd]river/library version mismatch|API mismatch: the NVIDIA kernel module"
    # the kernel's own side of it: `NVRM: API mismatch: the client has the version 535.54.03,
    # but NVRM: this kernel module has the version 530.30.02`
    r"|NVRM: API mismatch: the client (?:'[^']*' \(pid \d+\) )?has the version))",
    anchors=(
        "no kernel image is available",
        "is not compatible with the current PyTorch installation",
        "hipErrorNoBinaryForGpu",
        "HIP error: invalid device function",
        "PTX was compiled with an unsupported toolchain",
        "unsupported display driver / cuda driver combination",
        "forward compatibility was attempted",
        "cuDNN version incompatibility",
        "Driver/library version mismatch",
        "driver/library version mismatch",
        "API mismatch: the NVIDIA kernel module",
        "NVRM: API mismatch: the client",
    ),
    summary="the CUDA build does not fit this GPU or driver (architecture, toolkit, driver, cuDNN)",
    extract=lambda found: {
        "what": found["what"],
        "kind": "arch"
        if found["arch"]
        else "driver"
        if found["driver"]
        else "module"
        if found["module"]
        else "library",
    },
)

# The dynamic loader cannot find a CUDA library the build links against: an install whose
# CUDA wheels (nvidia-*-cu12) are missing or of another CUDA major, or an LD_LIBRARY_PATH
# that no longer holds them.
signature(
    "cuda.library_missing",
    r"(?P<library>lib(?:nccl|cudart|cublas\w*|cudnn\w*|cuda|nvrtc\w*|cusparse\w*|cufft\w*"
    r"|curand|cusolver\w*|nvJitLink|nvToolsExt)\.so[.\d]*): cannot open shared object file",
    anchors="cannot open shared object file",
    summary="a CUDA library the build needs is not where the loader looks",
)

signature(
    "nccl.cuda_arch_missing",
    r"(?:NCCL WARN |^\s*)Cuda failure (?:\d+ )?'(?P<reason>named symbol not found"
    r"|no kernel image is available for execution on the device|device kernel image is invalid"
    r"|invalid device function)",
    anchors=("NCCL WARN Cuda failure", "Cuda failure"),
    summary="NCCL's kernels were not built for this GPU's architecture (an NCCL or torch "
    "build older than the GPU)",
)

# NCCL's topology code returns ncclInternalError when the machine it reads (from /sys and
# its XML) holds links or attributes it cannot model: a release older than the GPUs or NICs,
# or devices hidden from the process unevenly (a container, HIP/ROCR visibility).
signature(
    "nccl.topology_unmodelled",
    r"(?P<what>Failed to find reverse path from remNode \S+ nlinks \d+ to node \S+"
    r"|(?P<attribute>Attribute \S+ of node \S+ not found))",
    anchors=("Failed to find reverse path from remNode", "of node"),
    summary="NCCL's topology search met links or attributes it cannot model (ncclInternalError)",
    # NCCL's own detection fills every attribute from /sys: one missing came from an XML file
    extract=lambda found: {"what": found["what"], "from_file": found["attribute"] is not None},
)

signature(
    "nccl.undefined_symbol",
    r"undefined symbol: (?P<symbol>nccl\w+)",
    anchors="undefined symbol: nccl",
    summary="a binary expects an NCCL function the loaded libnccl does not have (version mix)",
)

# A net plugin built against a newer libfabric (or NCCL) than the one loaded: `dlerror=.../
# libfabric.so.1: version `FABRIC_1.7' not found (required by .../libnccl-net.so)`. NCCL goes
# on without the plugin, over sockets.
signature(
    "nccl.plugin_version_missing",
    r"version `(?P<version>FABRIC_[\d.]+|NCCL_[\d.]+)' not found \(required by",
    anchors="' not found (required by",
    summary="NCCL's net plugin needs a newer library than the one loaded (a version mix)",
)
