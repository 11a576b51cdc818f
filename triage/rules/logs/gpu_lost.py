"""hang.rank_exited from logs: a GPU stopped answering, and the rank on it with it."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.signatures.hardware import LOST_XIDS, NVLINK_XIDS
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ids, ranks_of, signals


@rule("logs.gpu_lost", "hang.rank_exited")
def gpu_lost(evidence: EvidenceSet) -> Iterator[Finding]:
    """A GPU fell off the bus or hit an uncorrectable error, and its rank died or froze.

    What it detects:
    The driver's Xid 79 (fallen off the bus), 48/94/95 (uncorrectable ECC), 64 (a page it
    could not retire), 74 and fatal 144-150 (NVLink), 119/120 (GSP firmware timeout), 154
    (recovery needs a reset or reboot); the driver's `RmInitAdapter failed!`, its GSP
    heartbeat timeout and a PCIe error the GPU cannot recover from; nvidia-smi's `Unable to
    determine the device handle` or `GPU is lost`; CUDA's `uncorrectable ECC error
    encountered`.

    Why it happens:
    Hardware: a GPU, its PCIe link or NVLink, or its memory failed. The process on that GPU
    gets CUDA errors or hangs in the driver; its peers wait in their next collective until
    their timeout, or fail with a lost connection.

    Evidence:
    The Xid or nvidia-smi line naming the GPU (its PCI bus id), and any rank's error.

    Fix:
    Drain the node and have the GPU reset or replaced (`nvidia-smi -q`, the Xid in
    `dmesg`); restart the job from its last checkpoint on healthy nodes.

    Known false positives:
    A GPU lost long before the job ran (its log is then unrelated); Xid codes of
    application errors (13, 31, 43) are not read as a lost GPU.

    References:
    https://docs.nvidia.com/deploy/xid-errors/index.html
    """
    lost = [
        (e, s)
        for e, s in signals(evidence, "hardware.gpu_lost")
        if "xid" not in s.fields
        or s.fields["xid"] in LOST_XIDS
        or (s.fields["xid"] in NVLINK_XIDS and s.fields.get("fatal"))
    ]
    if not lost:
        return
    first = lost[0][1]
    bus = first.fields.get("bus") or first.fields.get("xid_bus")
    which = f"the GPU at PCI {bus}" if bus else "a GPU"
    ranks = ranks_of(s for _, s in lost)
    yield Finding(
        title=f"{which} stopped answering: the rank on it died or froze",
        summary=(
            f"`{first.text[:160]}`: {which} is gone from the driver (hardware, not the job's "
            "code). The rank on it fails or hangs in the driver, and its peers wait for it in "
            "their next collective or lose the connection."
        ),
        ranks=ranks,
        confidence=0.45,
        evidence=ids(lost)[:8],
        fix="Drain the node and have the GPU reset or replaced (`nvidia-smi -q`, the Xid in"
        " `dmesg -T`); restart from the last checkpoint on healthy nodes.",
        confirm="`dmesg -T | grep -i xid` on the node shows Xid 79/48/94/95/74 for that bus id",
    )
