"""InfiniBand and RoCE: the verbs calls, work completions and device events NCCL reports when
the RDMA fabric fails, and the locked-memory limit RDMA registration needs.

They are read with NCCL's facts (`nccl.py`: whether InfiniBand was found, which HCA the net
transport uses) by the comm.infiniband rule.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature


def _verbs(found: re.Match[str]) -> dict[str, Any]:
    reason = (found["reason"] or "").strip()
    out: dict[str, Any] = {"reason": reason} if reason else {}
    if found["call"].startswith("ibv_reg_mr") and "Cannot allocate memory" in reason:
        out["memlock"] = True
    return out


signature(
    "nccl.ib_verbs_failed",
    # rdma-core's own wording keeps the call's parentheses: `ibv_create_cq() failed: ...`
    r"\b(?P<call>ibv_[a-z0-9_]+)(?:\(\))? failed(?:(?: with (?:error )?(?:\d+ )?|: )(?P<reason>[^,]+))?",
    anchors="ibv_",
    summary="an InfiniBand verbs call failed (memory registration, queue pair setup or state change)",
    extract=_verbs,
)

_WC_STATUS = {
    "4": "IBV_WC_LOC_PROT_ERR",
    "5": "IBV_WC_WR_FLUSH_ERR",
    "10": "IBV_WC_REM_ACCESS_ERR",
    "12": "IBV_WC_RETRY_EXC_ERR",
    "13": "IBV_WC_RNR_RETRY_EXC_ERR",
}


def _completion(found: re.Match[str]) -> dict[str, Any]:
    status = found["status"] or found["status2"]
    out: dict[str, Any] = {}
    if status:
        out["status"] = int(status)
        name = found["status_name"] or _WC_STATUS.get(status)
        if name:
            out["status_name"] = name
    return out


signature(
    "nccl.ib_completion_error",
    r"(?:Got completion (?:from peer (?P<peer>[^\s<]+)(?:<\d+>)? )?with "
    r"(?:error (?P<status>\d+)|status=(?:(?P<status_name>IBV_WC_\w+)\()?(?P<status2>\d+)\)?)"
    r"|Got CQE with error)",
    anchors=("Got completion", "Got CQE with error"),
    summary="an InfiniBand/RoCE work request completed with an error (retry exceeded, access, flush)",
    extract=_completion,
)

signature(
    "nccl.ib_async_event",
    r"(?:Got async (?:error )?event|async fatal event)\s*(?:on \w+)?\s*:?\s*(?P<event>.*)",
    anchors=("Got async event", "Got async error event", "async fatal event"),
    summary="the InfiniBand device reported an asynchronous fault (port down, fatal device error)",
)

# NCCL's OFI net plugin (aws-ofi-nccl, EFA's transport) warns as `NET/OFI ...`: a request or
# remote write that completed with an error, a peer address libfabric would not insert, a
# completion queue it could not read. Its INFO lines (provider selection) are not failures.
signature(
    "nccl.ofi_error",
    r"NET/OFI (?P<what>Request \S+ (?:\(\w+\) )?completed with error|Remote write completed with error|"
    r"Unable to insert remote address into address vector|"
    r"Unable to (?:read from fi_cq_readerr|retrieve completion queue entries))"
    r"(?:.*?\bRC: (?P<rc>-?\d+))?",
    anchors=(
        "completed with error",
        "into address vector",
        "fi_cq_readerr",
        "completion queue entries",
    ),
    summary="NCCL's OFI (libfabric/EFA) plugin failed a request to a peer",
)

# Any other warning of the OFI plugin, and its failure to start: no EFA provider in the
# container (its /dev/infiniband not passed in), none on the instance, an unsupported
# provider. A single host without EFA then runs over sockets: a start failure matters when
# the job spans hosts.
signature(
    "nccl.ofi_warn",
    r"NCCL WARN NET/OFI\s*:?\s*(?P<what>\S.*)"
    r"|NET/OFI (?P<init>aws-ofi-nccl initialization failed|No eligible providers were found"
    r"|Could(?:n't| not) find any optimal provider)",
    anchors=(
        "NCCL WARN NET/OFI",
        "aws-ofi-nccl initialization failed",
        "No eligible providers were found",
        "find any optimal provider",
    ),
    summary="NCCL's OFI (libfabric/EFA) plugin warned of a failure, or could not start",
)

# libfabric's own log (FI_LOG_LEVEL=warn, and what its EFA provider prints before it aborts):
# `libfabric:718892:1658904526::efa:mr:efa_mr_regattr():632<warn> Unable to register MR:
# Cannot allocate memory`, `Libfabric error: (-12) Cannot allocate memory`.
signature(
    "libfabric.warn",
    r"libfabric:\d+:\d+:+(?P<provider>\w+):\S*?<warn> (?P<what>.+)"
    r"|Libfabric (?:EFA provider has encountered an internal error|error: \((?P<rc>-\d+)\)"
    r" (?P<error>.+))",
    anchors=("<warn> ", "Libfabric EFA provider has encountered", "Libfabric error: ("),
    summary="libfabric (the EFA or verbs provider under NCCL's OFI plugin) reported a failure",
)

# The kernel's RDMA driver refusing a command (dmesg): `infiniband efa_0: Failed to process
# command REG_MR (opcode 7) comp_status 1 err -12`, `infiniband mlx5_0: ...`.
signature(
    "ib.kernel_device_error",
    r"infiniband (?P<device>\w+): Failed to (?P<what>.+)",
    anchors="infiniband ",
    summary="the kernel's RDMA device driver failed a command (memory registration, a PD)",
)

signature(
    "ib.memlock",
    r"RLIMIT_MEMLOCK is (?P<bytes>\d+) bytes"
    # `ulimit -a`'s line, pasted: a number (not `unlimited`) is a limit RDMA meets
    r"|max locked memory\s+\(kbytes, -l\)\s+(?P<kbytes>\d+)\b",
    anchors=("RLIMIT_MEMLOCK", "max locked memory"),
    summary="the locked-memory ulimit is too low for RDMA memory registration",
    extract=lambda found: {
        "bytes": int(found["bytes"]) if found["bytes"] else int(found["kbytes"]) << 10,
        "source": "nccl" if found["bytes"] else "ulimit",
    },
)

# A port of the host's InfiniBand/RoCE adapter that is not up, in the words of the tools a
# report pastes and of the kernel: `rdma link`'s `state DOWN physical_state POLLING`, ibstat's
# `Physical state: Polling`, ibv_devinfo's `state: PORT_DOWN (1)`, ibdev2netdev's `==> ib0
# (Down)`, mlx5's `mlx5_3: Port: 1 Link DOWN`; and the adapter's firmware stopping (`device's
# health compromised`). A port the job does not use may be down on a healthy host.
signature(
    "ib.port_down",
    r"\bstate (?:DOWN|INIT) physical_state (?P<physical>[A-Z_]+)"
    r"|^\s*Physical state:\s*(?P<ibstat>Polling|Disabled)\b"
    r"|^\s*LinkState:\.+(?:Down|Init)\b"
    r"|^\s*state:\s+PORT_(?:DOWN|INIT)\b"
    r"|==> (?P<netdev>\S+) \(Down\)"
    r"|(?P<hca>mlx\d_\d+): Port: \d+ Link DOWN"
    r"|mlx\d_core (?P<pci>[0-9a-f:.]+): device's health compromised",
    anchors=(
        "physical_state",
        "Physical state:",
        "LinkState:",
        "PORT_DOWN",
        "PORT_INIT",
        "(Down)",
        "Link DOWN",
        "device's health compromised",
    ),
    summary="an InfiniBand/RoCE port on this host is not up (or its adapter failed)",
)

# Any WARN of NCCL's InfiniBand transport (`NCCL WARN NET/IB : ...`): the device, a queue
# pair, its resiliency path, RoCE's setup. The specific ones above name the fault; this one
# says only that it is in the InfiniBand transport. NCCL prints the absence of a device as
# INFO, but some builds warn it: that is not a failure; nor is a collective's size mismatch
# the transport caught (nccl.net_size_mismatch).
signature(
    "nccl.ib_warn",
    r"NCCL WARN NET/IB(?:/\w+)?(?!\s*:?\s*(?:No device found|req \d+/\d+ tag \w+ peer \S+"
    r" collective mismatch error))\s*:?\s*(?P<what>\S.*)",
    anchors="NCCL WARN NET/IB",
    summary="NCCL's InfiniBand transport warned of a failure",
)
