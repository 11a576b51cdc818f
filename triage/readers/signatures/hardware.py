"""A GPU that stopped answering: the driver's Xid reports and nvidia-smi's lost devices.

NVIDIA's Xid catalogue names the errors that take a GPU away from its process: 79 (the
GPU has fallen off the bus), 48, 94 and 95 (uncorrectable ECC errors), 64 (a page it could
not retire), 74 (NVLink error) and Blackwell's fatal NVLink errors (144-150), 119 and 120 (the
GSP firmware stopped responding), 154 (a recovery that needs a reset or a reboot). A GPU
the driver could not bring up says `RmInitAdapter failed!`; a fatal PCIe error the GPU
could not recover from says `nvidia 0000:03:00.0: AER: can't recover`. The kernel log shows them as
`NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.`; nvidia-smi then
answers `Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error` or
`GPU is lost`; CUDA reports `uncorrectable ECC error encountered` or `uncorrectable NVLink
error detected during the execution`.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

#: Xid codes that mean the GPU is gone or its memory is corrupt, not an application bug.
LOST_XIDS = frozenset({48, 64, 74, 79, 94, 95, 119, 120, 154})
#: Blackwell's NVLink Xids: the line says whether the link error was fatal.
NVLINK_XIDS = frozenset(range(144, 151))
#: Xid codes of a kernel's own fault (13: an exception in a kernel, an out-of-range access;
#: 31: a memory-management fault, a bad address; 43: the channel stopped after it): the
#: process that ran the kernel is lost, the GPU is not.
KERNEL_FAULT_XIDS = frozenset({13, 31, 43})


def _lost(found: re.Match[str]) -> dict[str, Any]:
    """The Xid and whether the driver called it fatal; the GPU's bus, whichever line named it."""
    out: dict[str, Any] = {"xid": int(found["xid"])} if found["xid"] else {}
    if found["fatal"]:
        out["fatal"] = True
    if bus := found["init_bus"] or found["aer_bus"]:
        out["bus"] = bus
    return out


signature(
    "hardware.gpu_lost",
    r"Unable to determine the device handle for GPU ?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-7])|"
    r"GPU has fallen off the bus|GPU is lost|uncorrectable ECC error encountered|"
    r"uncorrectable NVLink error detected|"
    # the driver could not bring the GPU up, or its firmware stopped answering
    r"NVRM: GPU (?P<init_bus>[0-9A-Fa-f:.]+): RmInitAdapter failed|RmInitAdapter failed!"
    r"|rm_init_adapter failed|_kgspIsHeartbeatTimedOut: Heartbeat timed out"
    r"|nvidia (?P<aer_bus>[0-9A-Fa-f:.]+): AER: can't recover"
    # AMD's driver resetting a hung GPU (every process on it is lost): `amdgpu: GPU reset
    # begin!`, `amdgpu 0000:c1:00.0: amdgpu: GPU reset(2) failed`
    r"|amdgpu: GPU reset (?:begin!|\(\d+\) failed)|"
    r"NVRM: Xid \(PCI:(?P<xid_bus>[0-9A-Fa-f:.]+)\): (?P<xid>\d+)\b(?P<fatal>.*\bFatal\b)?",
    anchors=(
        "Unable to determine the device handle for GPU",
        "GPU has fallen off the bus",
        "GPU is lost",
        "uncorrectable ECC error encountered",
        "uncorrectable NVLink error detected",
        "RmInitAdapter failed",
        "rm_init_adapter failed",
        "Heartbeat timed out",
        "AER: can't recover",
        "amdgpu: GPU reset",
        "NVRM: Xid",
    ),
    summary="a GPU stopped answering (fell off the bus, uncorrectable ECC, NVLink or firmware"
    " failure): the rank on it dies or freezes",
    extract=_lost,
)
