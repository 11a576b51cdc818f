"""comm.version_mismatch from logs: NCCL, torch and the driver do not fit together."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import CommView, comm_view, quote
from triage.rules.logs._signals import Found, Signal, ids, ranks_of, strongest

_IMPORT = re.compile(r"import|undefined symbol|driver|CUDA|init_process_group|NCCL")


@rule("logs.version_mismatch", "comm.version_mismatch")
def version_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks load different NCCL versions, or NCCL/torch do not fit the driver or each other.

    What it detects:
    NCCL's own `Mismatched NCCL version detected : rank 0 version 22703 rank 8 version
    21805` and RAS's `NCCL version mismatch with remote peer` (0.9); `CUMEM not supported
    prior to CUDA 11.3` (0.65: a driver older than NCCL needs);
    different `NCCL version X` across ranks, hosts or log files; `CUDA driver version is
    insufficient for CUDA runtime version`; torch's `NVIDIA driver on your system is too
    old`; `undefined symbol: nccl...` (a torch build linked against another libnccl), and a
    net plugin's `version `FABRIC_1.7' not found (required by .../libnccl-net.so)` (0.6:
    NCCL goes on over sockets without it); NCCL
    bootstrap `Message truncated` (peers speak different NCCL protocols); NCCL's `Cuda
    failure 'named symbol not found'` or `no kernel image` (its kernels predate the GPU);
    Ray's `Version mismatch: The cluster was started with:` (a job whose Ray or Python
    differs from the running cluster's); NCCL's `cannot be captured in a graph if either it
    wasn't built with CUDA runtime >= 11.3 or if the installed CUDA driver < R465` (an NCCL
    built for an older CUDA than the job's); weaker, NCCL's topology search failing (`Failed to find reverse path from remNode`,
    `Attribute busid of node nic not found`): a release older than the machine, or devices
    hidden unevenly; weaker still (0.3, beside comm.unknown), NCCL's bare `unhandled cuda
    error` when no line names the failing call: an NCCL built for another CUDA, a driver
    older than it needs, a release with a since-fixed bug. Below NCCL, the CUDA build
    against the GPU or driver: `no kernel image is available`, torch's `with CUDA
    capability sm_120 is not compatible with the current PyTorch installation` (ROCm's
    `hipErrorNoBinaryForGpu`, `HIP error: invalid device function`), `the
    provided PTX was compiled with an unsupported toolchain`, Error 803 (user-mode driver
    and kernel module differ) and 804, torch's `cuDNN version incompatibility`, NVML's
    `Driver/library version mismatch` (0.85: a driver upgraded without a reboot); NCCL's
    `NCCL library is too old. This application was compiled with NCCL version` (0.8); a CUDA
    library the loader cannot find (`libcudart.so.12: cannot open shared object file`, 0.6).

    Why it happens:
    Nodes with different container images or environments (pip nvidia-nccl-cu* wheels vs a
    system NCCL picked up through LD_LIBRARY_PATH or LD_PRELOAD), a driver older than the
    CUDA that torch/NCCL were built for, a partially upgraded environment.

    Evidence:
    The version per rank/host/file, the loader or driver error.

    Fix:
    Run the same image/environment on every node; check `python -c "import torch;
    print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"` on each, remove
    stray libnccl from LD_LIBRARY_PATH/LD_PRELOAD, and upgrade the driver to the one the
    CUDA build requires.

    Known false positives:
    Logs concatenated from runs before and after an upgrade show two versions without any
    single job mixing them.

    References:
    NCCL release notes (protocol compatibility between versions); CUDA toolkit/driver
    compatibility table.
    """
    view = comm_view(evidence)
    found = _findings(view)
    if not found:
        return
    (confidence, what, items, fix), every = strongest(found)
    ranks = ranks_of(s for _, s in items)
    yield Finding(
        title=what,
        summary=f"{what}: `{quote(items)}`.",
        ranks=ranks,
        location=view.location(ranks, _IMPORT),
        confidence=confidence,
        evidence=ids(every)[:8],
        fix=fix,
        confirm="torch.__version__, torch.version.cuda and torch.cuda.nccl.version() differ between hosts",
    )


_SAME_ENV = (
    'Use one image/environment on every node and check each with `python -c "import torch; '
    'print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"`; remove '
    "stray libnccl from LD_LIBRARY_PATH / LD_PRELOAD."
)
_DRIVER = (
    "Upgrade the NVIDIA driver to one that supports the CUDA version torch/NCCL were built "
    "with (`nvidia-smi` shows the highest CUDA it supports), or install a torch build for "
    "the older CUDA."
)


_ARCH = (
    "Install a torch build whose CUDA version supports this GPU (e.g. cu128 wheels for "
    "Blackwell, cu118 or later for Hopper) and let it bring its own NCCL; check "
    "`python -c 'import torch; print(torch.cuda.get_arch_list())'` lists the GPU's sm_XX, and "
    "unset LD_LIBRARY_PATH/LD_PRELOAD entries that load an older libnccl."
)


_TOPOLOGY = (
    "Run an NCCL release that knows this hardware (torch's own nvidia-nccl-cu* wheel, or the "
    "release notes' first version for the GPU/NIC generation) instead of an older one bundled "
    "in the image; if the version is recent, compare the devices the process sees "
    "(CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES rather than ROCR_VISIBLE_DEVICES on ROCm, a "
    "container's /sys) with the host's, and unset NCCL_TOPO_FILE."
)


_CUDA_CALL = (
    'Compare the versions on each host (`python -c "import torch; print(torch.__version__, '
    'torch.version.cuda, torch.cuda.nccl.version())"`, the driver in `nvidia-smi`): load an '
    "NCCL built for torch's CUDA (the nvidia-nccl wheel, no stray libnccl on LD_LIBRARY_PATH), "
    "a driver that CUDA needs, and NCCL's latest patch release of its series. Rerun with "
    "NCCL_DEBUG=INFO: the `Cuda failure '...'` line before the error names the call."
)


def _findings(view: CommView) -> list[Found]:
    found: list[Found] = []
    by_version: dict[str, list[Signal]] = {}
    for e, s in view.of("nccl.version"):
        by_version.setdefault(str(s.fields.get("version")), []).append((e, s))
    if len(by_version) > 1:
        where = "; ".join(
            f"{version} on {_owners(items)}" for version, items in sorted(by_version.items())
        )
        items = [group[0] for group in by_version.values()]
        found.append((0.8, f"ranks load different NCCL versions ({where})", items, _SAME_ENV))
    differ = view.of("nccl.versions_differ")
    if differ:
        what = "NCCL found ranks of one communicator running different NCCL releases"
        found.append((0.9, what, differ, _SAME_ENV))
    library = view.of("nccl.library_too_old")
    if library:
        found.append(
            (
                0.8,
                "the libnccl loaded at run time is older than the one the code was built against",
                library,
                "Load the NCCL the application was built with: remove older libnccl from"
                " LD_LIBRARY_PATH / LD_PRELOAD (a system or conda copy ahead of the"
                " nvidia-nccl wheel), or upgrade the NCCL package to at least that version.",
            )
        )
    too_old = view.of("nccl.cuda_too_old")
    if too_old:
        what = "NCCL needs a newer CUDA driver than this host has"
        found.append((0.65, what, too_old, _DRIVER))
    ray = view.of("ray.version_mismatch")
    if ray:
        found.append(
            (
                0.8,
                "a process runs another Ray or Python version than the Ray cluster it joins",
                ray,
                "Start the Ray cluster from the job's own environment (the same Ray and Python"
                " on every node: `ray stop`, then `ray start` with that interpreter), or run the"
                " job in the environment the cluster was started from.",
            )
        )
    horovod = view.of("horovod.framework_version")
    if horovod:
        fields = horovod[0][1].fields
        found.append(
            (
                0.85,
                f"Horovod was built against {fields['framework']} {fields['built']}, and"
                f" {fields['found']} is installed",
                horovod,
                "Rebuild Horovod against the installed framework (`pip install --no-cache-dir"
                " --force-reinstall horovod` with HOROVOD_WITH_PYTORCH=1), or install the"
                " version it was built with.",
            )
        )
    driver = view.of("driver.insufficient", "driver.too_old")
    if driver:
        found.append((0.85, "the NVIDIA driver is too old for this CUDA build", driver, _DRIVER))
    capture = view.of("nccl.graph_capture_unsupported")
    if capture:
        found.append(
            (
                0.75,
                "the NCCL library the job loads cannot be captured in a CUDA graph: it was built"
                " for an older CUDA runtime than the job's, or the driver is older than R465",
                capture,
                "Load an NCCL built for the job's CUDA (the nvidia-nccl wheel of torch's CUDA"
                " major, e.g. nvidia-nccl-cu12 under a cu12 torch; unset LD_LIBRARY_PATH or"
                " VLLM_NCCL_SO_PATH entries that point at another libnccl) and a driver of R465"
                " or later; running without CUDA graphs (eager mode) works around it.",
            )
        )
    symbols = view.of("nccl.undefined_symbol")
    if symbols:
        symbol = symbols[0][1].fields.get("symbol")
        found.append(
            (
                0.85,
                f"the loaded libnccl lacks {symbol}: torch was built against another NCCL",
                symbols,
                _SAME_ENV,
            )
        )
    plugin = view.of("nccl.plugin_version_missing")
    if plugin:
        version = plugin[0][1].fields.get("version")
        what = (
            f"NCCL's net plugin needs {version}, which the library it loads lacks: the plugin"
            " was built against a newer one"
        )
        # NCCL goes on without the plugin (over sockets): slow, or failing across hosts
        found.append((0.6, what, plugin, _SAME_ENV))
    arch = view.of("nccl.cuda_arch_missing")
    if arch:
        reason = arch[0][1].fields.get("reason")
        found.append(
            (
                0.75,
                f"NCCL's CUDA kernels do not run on this GPU ('{reason}'): the NCCL (or torch) "
                "build predates the GPU's architecture",
                arch,
                _ARCH,
            )
        )
    found.extend(_cuda_build(view, after_nccl=bool(arch)))
    topology = view.of("nccl.topology_unmodelled")
    if topology:
        from_file = all(s.fields.get("from_file") for _, s in topology)
        found.append(
            (
                0.3 if from_file else 0.4,
                "NCCL's topology search failed: its release may predate this machine's GPUs or"
                " NICs, or devices are hidden from the process unevenly",
                topology,
                _TOPOLOGY,
            )
        )
    cuda = view.unnamed("cuda")
    if cuda:
        found.append(
            (
                0.3,
                "NCCL's CUDA calls failed and no line says which: the NCCL, CUDA and driver "
                "versions in use are the usual suspects",
                cuda,
                _CUDA_CALL,
            )
        )
    truncated = view.of("nccl.message_truncated")
    if truncated:
        found.append(
            (0.5, "NCCL bootstrap peers exchange messages of different sizes", truncated, _SAME_ENV)
        )
    return found


_MODULE = (
    "Reboot the node (or unload and reload the nvidia kernel modules) so that the module and"
    " the user-space driver are one release: a driver upgraded without a reboot leaves the"
    " old module loaded; in a container, let the NVIDIA container toolkit mount the host's"
    " driver libraries instead of shipping its own."
)
_BUILD = {
    "arch": (0.75, "the CUDA build has no kernels for this GPU (`{}`): torch or the library"
             " predates the GPU's architecture", _ARCH),
    "driver": (0.8, "the NVIDIA driver does not fit the CUDA build (`{}`)", _DRIVER),
    "library": (0.8, "a CUDA library differs from the one torch was built against (`{}`)",
                _SAME_ENV),
    "module": (0.85, "the NVIDIA kernel module and the user-space driver differ (`{}`)",
               _MODULE),
}  # fmt: skip


_LIBRARIES = (
    "Install the CUDA libraries of torch's own CUDA version (reinstall torch so that pip brings"
    " its nvidia-* wheels, or the matching CUDA toolkit), and check LD_LIBRARY_PATH does not"
    " point at another CUDA."
)


def _cuda_build(view: CommView, after_nccl: bool) -> list[Found]:
    """The CUDA stack below torch against the GPU or the driver, in CUDA's or torch's words
    (left to NCCL's own line when it said the same), and a CUDA library the loader lacks."""
    found: list[Found] = []
    build = [] if after_nccl else view.of("cuda.build_mismatch")
    if build:
        fields = build[0][1].fields
        confidence, what, fix = _BUILD[str(fields.get("kind"))]
        found.append((confidence, what.format(fields.get("what")), build, fix))
    missing = view.of("cuda.library_missing")
    if missing:
        library = missing[0][1].fields.get("library")
        what = f"the loader cannot find {library}, which the CUDA build needs"
        found.append((0.6, what, missing, _LIBRARIES))
    return found


def _owners(items: list[Signal]) -> str:
    ranks = ranks_of(s for _, s in items)
    if ranks:
        return "rank " + ",".join(map(str, ranks[:6]))
    hosts = sorted({s.host for _, s in items if s.host})
    if hosts:
        return ", ".join(hosts[:3])
    return ", ".join(sorted({s.path.rsplit("/", 1)[-1] for _, s in items})[:3])
