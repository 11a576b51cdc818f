"""comm.p2p_unsupported from what the text says of the host: GPUs linked only over PCIe."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import Signal, ids, shows_failure, signals

_CONTEXT = frozenset({"gpu.topology_row", "gpu.consumer_card"})
_FIX = (
    "Test the peer-to-peer path: rerun with NCCL_P2P_DISABLE=1 (NCCL then goes through host"
    " shared memory) and run the CUDA samples' p2pBandwidthLatencyTest. If P2P is the fault,"
    " set the IOMMU to passthrough (`iommu=pt`, or off in the BIOS) and disable PCIe ACS, or"
    " keep NCCL_P2P_DISABLE=1 on GeForce cards, which do not support P2P over PCIe."
)


@rule("logs.p2p_context", "comm.p2p_unsupported", without_failure=True)
def p2p_context(evidence: EvidenceSet) -> Iterator[Finding]:
    """The host's GPUs reach each other only over PCIe, and the text shows no failure.

    What it detects:
    `nvidia-smi topo -m` rows of two or more GPUs whose links to each other are PCIe and CPU
    paths (PIX, PXB, PHB, NODE, SYS) with no NVLink (NV#); or two or more mentions of
    consumer cards (GeForce RTX 3090/4090, GTX 1080 Ti, TITAN RTX), in text with no failure
    line: what a person pastes about the machine when a one-host job hangs or copies wrong
    values between GPUs.

    Why it happens:
    Without NVLink, NCCL's P2P transport and CUDA's peer copies go through the PCIe fabric.
    With the IOMMU translating DMA (common on AMD boards and VMs) or ACS redirecting peer
    traffic, those writes are lost: the first collective hangs, or a copy to another GPU
    reads zeros. GeForce cards from the 40 series on do not support peer access over PCIe.

    Evidence:
    The topology rows, or the card names.

    Fix:
    Rerun with NCCL_P2P_DISABLE=1 and run p2pBandwidthLatencyTest; turn the IOMMU to
    passthrough and ACS off, or keep P2P disabled on GeForce cards.

    Known false positives:
    Many PCIe-only hosts run fine; this is context, not a failure, and any rule that reads
    a failure outranks it.

    References:
    NCCL troubleshooting guide, "PCI Access Control Services (ACS)" and "IOMMU".
    """
    if shows_failure(evidence, besides=_CONTEXT):
        return
    rows = _pcie_only(signals(evidence, "gpu.topology_row"))
    cards = signals(evidence, "gpu.consumer_card")
    if len(rows) >= 2:
        what, found, confidence = "GPUs linked only over PCIe (no NVLink)", rows, 0.25
    elif len(cards) >= 2:
        card = str(cards[0][1].fields.get("card", "")).strip()
        what, found, confidence = f"consumer GPUs ({card}) without NVLink", cards, 0.2
    else:
        return
    yield Finding(
        title=f"{what}: peer-to-peer over PCIe is the usual suspect",
        summary=f"The text shows {what} and no failure: on such hosts NCCL's P2P transport and"
        " peer copies cross the PCIe fabric, where an IOMMU or ACS (or a GeForce card's lack"
        " of peer access) makes the first collective hang or a copy read zeros.",
        ranks=[],
        confidence=confidence,
        evidence=ids(found)[:8],
        fix=_FIX,
        confirm="the job runs with NCCL_P2P_DISABLE=1, or p2pBandwidthLatencyTest fails",
    )


def _pcie_only(rows: list[Signal]) -> list[Signal]:
    """The rows of a matrix in which no GPU reaches another over NVLink."""
    gpus = {int(s.fields["gpu"]) for _, s in rows}
    nvlink = any(
        str(link).startswith("NV")
        for _, s in rows
        for index, link in enumerate(s.fields["links"])
        if index in gpus
    )
    return [] if nvlink else rows
