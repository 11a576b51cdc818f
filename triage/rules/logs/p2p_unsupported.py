"""comm.p2p_unsupported from logs: GPU peer-to-peer between local GPUs fails or hangs."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view, quote, stopped_after_setup, stopped_in_nvls
from triage.rules.logs._signals import ids, ranks_of, signals
from triage.text import rank_label

_SETUP = re.compile(r"init_process_group|ProcessGroup|all_reduce|barrier|NCCL|peer access")
#: NCCL lines a log needs before its end reads as a stall; one alone is a line someone
#: quoted, not a log that stopped.
_NCCL_LINES = 2
_FIX = (
    "Disable the IOMMU for GPU traffic (BIOS VT-d/AMD-Vi off, or `iommu=pt` / "
    "`intel_iommu=off` / `amd_iommu=off` on the kernel command line) and ACS on the PCIe "
    "switches; check `nvidia-smi topo -m` and the CUDA p2pBandwidthLatencyTest. "
    "NCCL_P2P_DISABLE=1 works around it (traffic goes through host shared memory)."
)


@rule("logs.p2p_unsupported", "comm.p2p_unsupported")
def p2p_unsupported(evidence: EvidenceSet) -> Iterator[Finding]:
    """GPU peer-to-peer (CUDA IPC, P2P over PCIe/NVLink) fails or stalls between local GPUs.

    What it detects:
    `peer access is not supported between these two devices`, NCCL's `P2P is disabled
    between NVLINK connected GPUs 1 and 3` (a hardware fault on the link), `failed to open CUDA IPC
    handle`, failed cudaIpc*MemHandle calls; and the classic silent case: an
    NCCL_DEBUG=INFO log of ranks all on one host that stops during communicator setup
    (no `Init COMPLETE`, no error), or whose P2P channels are set up and the first
    collective then times out, or that says nothing after its local (P2P, SHM) channels
    and `Init COMPLETE` (weaker: the first collective never ran); nccl-tests (all_reduce_perf) on one host that prints its
    ranks and no measured size.

    Why it happens:
    With the IOMMU translating DMA (VT-d/AMD-Vi on, common on AMD workstations and VMs) or
    PCIe ACS redirecting peer traffic to the root complex, P2P writes between GPUs are lost
    or blocked, so NCCL's P2P transport waits forever; consumer GPUs and some virtualised
    GPUs do not support peer access at all.

    Evidence:
    The CUDA peer/IPC error; or the NCCL setup lines (versions, channels via P2P/IPC), one
    host only, nothing after them.

    Fix:
    Turn the IOMMU off or to passthrough (`iommu=pt`) and disable ACS; NCCL_P2P_DISABLE=1
    works around it. Confirm with the CUDA samples' p2pBandwidthLatencyTest.

    Known false positives:
    A log cut short by the person who pasted it looks like a stall (a single NCCL line
    scores 0.3 at most); on several hosts the network (wrong interface, InfiniBand) is the
    likelier cause and this rule stays quiet.

    References:
    NCCL troubleshooting guide, "PCI Access Control Services (ACS)" and "IOMMU"; NVIDIA/nccl
    issues on P2P hangs fixed by iommu=pt or NCCL_P2P_DISABLE=1.
    """
    view = comm_view(evidence)
    explicit = view.of("nccl.p2p_failed", "nccl.p2p_disabled_nvlink")
    overrides = view.overrides()
    p2p_off = overrides.get("NCCL_P2P_DISABLE", "0") not in ("0", "") or overrides.get(
        "NCCL_P2P_LEVEL", ""
    ) in ("LOC", "0")
    iommu = view.of("nccl.iommu")
    if explicit:
        ranks = ranks_of(s for _, s in explicit)
        who = f" ({rank_label(ranks)})" if ranks else ""
        yield Finding(
            title=f"GPU peer access between local GPUs failed{who}",
            summary=f"CUDA peer-to-peer access failed: `{quote(explicit)}`.",
            ranks=ranks,
            location=view.location(ranks, _SETUP),
            confidence=0.85,
            evidence=ids(explicit + iommu)[:8],
            fix=_FIX,
            confirm="NCCL_P2P_DISABLE=1 makes the job run",
        )
        return
    if view.multi_host is not False or p2p_off:
        return
    setup = view.of(
        "nccl.version", "nccl.network", "nccl.init", "nccl.channel_p2p", "nccl.tests_rank"
    )
    if view.stalled_in_setup():
        confidence, when = 0.6, "stops during NCCL communicator setup"
    elif view.tests_stalled():
        confidence, when = 0.5, "stalls in nccl-tests before its first measured size"
    elif (
        view.has("nccl.channel_p2p")
        and view.silent(allow_timeouts=True)
        and (view.failure_signals() or view.errors())
    ):
        confidence, when = 0.45, "sets up P2P channels and the first collective never completes"
    elif view.has("nccl.channel_p2p", "nccl.channel_shm") and stopped_after_setup(evidence):
        confidence, when = 0.3, "stops right after its communicators are set up"
    else:
        return
    if len([s for _, s in signals(evidence) if s.signature.startswith("nccl.")]) < _NCCL_LINES:
        confidence = min(confidence, 0.3)
    injected = overrides.get("NCCL_TOPO_FILE") or overrides.get("NCCL_GRAPH_FILE")
    if injected:  # NCCL did not probe this machine: a file that does not fit it stalls alike
        confidence -= 0.2
    if iommu:
        confidence += 0.1
    if stopped_in_nvls(evidence):  # the last step named is NVLS setup (comm.fabric), not P2P
        confidence -= 0.2
    host = next(iter(view.hosts), None)
    on = f" on {host}" if host else " on one host"
    ranks = ranks_of(s for _, s in view.of("nccl.init"))
    yield Finding(
        title=f"NCCL {when}{on}: GPU peer-to-peer is the usual suspect",
        summary=(
            f"Every rank runs{on} and the NCCL log {when}, with no error. Between GPUs of one "
            "host this is the classic P2P failure: the IOMMU or PCIe ACS blocks peer traffic "
            "and NCCL's P2P transport waits forever."
            + (" The kernel runs without iommu=pt." if iommu else "")
            + (
                f" But NCCL read its topology from {injected} instead of probing this machine,"
                " and a file that does not describe it stalls setup alike."
                if injected
                else ""
            )
        ),
        ranks=[],
        location=view.location(ranks),
        confidence=round(confidence, 2),
        evidence=ids(setup[-6:] + iommu)[:8],
        fix=_FIX,
        confirm="NCCL_P2P_DISABLE=1 makes the job run, or p2pBandwidthLatencyTest fails",
    )
