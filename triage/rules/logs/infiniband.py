"""comm.infiniband from logs: the InfiniBand/RoCE fabric or its configuration failed NCCL."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import CommView, comm_view, quote
from triage.rules.logs._signals import Found, ids, ranks_of, strongest
from triage.text import rank_label

_SETUP = re.compile(r"init_process_group|ProcessGroup|all_reduce|barrier|NCCL")

_MEMLOCK_FIX = (
    "Raise the locked-memory limit to unlimited for the job (`ulimit -l unlimited`; "
    "`* soft/hard memlock unlimited` in /etc/security/limits.conf; "
    "`--ulimit memlock=-1` for docker; LimitMEMLOCK=infinity for systemd/Slurm daemons)."
)
_OFI_FIX = (
    "Check that the hosts reach each other over EFA/libfabric: the security group must allow "
    "all inbound and outbound traffic to and from itself, the instances share a subnet or "
    "placement group, and `fi_pingpong -p efa` works between them; check `fi_info -p efa`, "
    "FI_* overrides and the aws-ofi-nccl and libfabric versions, and whether the peer rank died "
    "first. NCCL_NET=Socket confirms by leaving the plugin out (slowly)."
)
_NICS_FIX = (
    "Give every node the same network devices: compare `ibv_devinfo -l` (or `ls"
    " /sys/class/infiniband`) and NCCL_IB_HCA across nodes; a node whose NICs are down, whose"
    " container lacks the RDMA devices (--device=/dev/infiniband, the RDMA resource in"
    " Kubernetes), or whose NCCL_IB_HCA names fewer ports gives NCCL this count; set"
    " NCCL_IGNORE_NET_MISMATCH=1 only where the difference is intended."
)
#: `ulimit -l` below this is a limit RDMA registration meets (unlimited is what NVIDIA asks).
_MEMLOCK_LOW = 1 << 30
_PORT_FIX = (
    "Check the port the job's HCA uses (`ibstat`, `ibv_devinfo`: State Active, Physical state"
    " LinkUp): reseat or replace the cable or transceiver, check the switch port and, for"
    " InfiniBand, the subnet manager (opensm); a port the job is not meant to use can be left"
    " out with NCCL_IB_HCA."
)
#: ENOMEM in an RDMA layer's words: a registration over the locked-memory limit.
_ENOMEM = re.compile(r"Cannot allocate memory|\b(?:err|RC:) ?-12\b|\[-12\]|\(-12\)")
_QP_FIX = (
    "Check the fabric between the hosts with `ibv_devinfo` (ports ACTIVE), `show_gids` and "
    "perftest (`ib_write_bw`) using the same device and GID; set NCCL_IB_GID_INDEX to the "
    "RoCE v2 GID (often 3), NCCL_IB_HCA to the connected HCAs, and try NCCL_CROSS_NIC=0 on "
    "rail-optimised fabrics."
)


@rule("logs.infiniband", "comm.infiniband")
def infiniband(evidence: EvidenceSet) -> Iterator[Finding]:
    """An InfiniBand/RoCE verbs call, completion or port failed under NCCL.

    What it detects:
    any other `NCCL WARN NET/IB : ...` when nothing more specific reads (0.5: the fault is in
    the InfiniBand transport; `No device found` is not a failure);
    NCCL's `Detected mixed local Net device counts across ranks (min 0, max 8)` (0.7: some
    node's NICs are missing, down or hidden from its container: InfiniBand on some nodes
    only); `Call to ibv_reg_mr/ibv_create_qp/ibv_modify_qp failed ...`, `NET/IB : Got completion
    from peer ... with error N` (12 = IBV_WC_RETRY_EXC_ERR, transport retries exceeded),
    asynchronous device events (port error, fatal event), libibverbs' RLIMIT_MEMLOCK warning,
    and a multi-host NCCL log over IB that stops during communicator setup. NCCL's OFI
    plugin (aws-ofi-nccl: EFA, libfabric) reporting `NET/OFI Request ... completed with
    error`, a remote write completed with error, `Unable to insert remote address into address
    vector` or an unreadable completion queue (0.6; 0.4 beside another rank's own failure);
    when nothing more specific reads (0.5: an instance without EFA prints them too, and NCCL
    goes on over sockets), any other `NCCL WARN NET/OFI ...`, the plugin
    failing to start (`aws-ofi-nccl initialization failed`, `Could not find any optimal
    provider`), libfabric's own `<warn>` lines and `Libfabric error: (-12) ...`, the kernel's
    `infiniband efa_0: Failed to process command REG_MR`; those that say Cannot allocate
    memory (or -12) are a registration over the locked-memory limit (0.6).

    Why it happens:
    Memory registration needs locked memory (`ulimit -l`, often 64 KB in containers) and,
    for GPU buffers, nvidia-peermem or DMA-BUF; queue pairs fail to reach RTR when the GID
    index selects an address the other side cannot route (RoCE v1 vs v2, IPv6 link-local),
    when NICs on different rails cannot talk, or when a port is down. Retry-exceeded
    completions mean the remote NIC stopped answering: a link or switch fault, or the peer
    process died.

    Evidence:
    The verbs call and errno, the completion status and the peer address, the HCA list NCCL
    used (`NET/IB : Using ...`) and NCCL_IB_* overrides.

    Fix:
    For memlock: raise `ulimit -l` to unlimited. For QP/GID errors: verify with `ibv_devinfo`,
    `show_gids` and `ib_write_bw`, set NCCL_IB_GID_INDEX / NCCL_IB_HCA, try NCCL_CROSS_NIC=0.
    For retry-exceeded completions: check the named peer host's links (`ibstat`, switch
    counters) and whether that rank's process died first. NCCL_IB_DISABLE=1 confirms by
    falling back to sockets (slowly).

    Known false positives:
    A peer process that dies makes its partners' work requests fail with retry-exceeded or
    flush errors; when another rank's own failure is visible, completion errors score low
    and comm.peer_failure leads.

    References:
    NCCL troubleshooting guide ("InfiniBand", "RoCE", GID index); NCCL environment variables
    NCCL_IB_HCA, NCCL_IB_GID_INDEX, NCCL_IB_DISABLE.
    """
    view = comm_view(evidence)
    found = _findings(view)
    if not found:
        return
    (confidence, what, items, fix), every = strongest(found)
    ranks = ranks_of(s for _, s in items)
    hcas = sorted({h for _, s in view.of("nccl.ib_devices") for h in s.fields.get("hcas", [])})
    used = f" NCCL used {', '.join(hcas[:6])}." if hcas else ""
    yield Finding(
        title=what + (f" ({rank_label(ranks)})" if ranks else ""),
        summary=f"{what}: `{quote(items)}`.{used}",
        ranks=ranks,
        location=view.location(ranks, _SETUP),
        confidence=confidence,
        evidence=ids(every)[:8],
        fix=fix,
        confirm="NCCL_IB_DISABLE=1 (sockets) makes the job run, and `ib_write_bw` between the hosts fails",
    )


def _findings(view: CommView) -> list[Found]:
    found: list[Found] = []
    verbs = view.of("nccl.ib_verbs_failed")
    limits = [(e, s) for e, s in view.of("ib.memlock") if s.fields["bytes"] < _MEMLOCK_LOW]
    memlock_warning = [(e, s) for e, s in limits if s.fields["source"] == "nccl"]
    memlock = [(e, s) for e, s in verbs if s.fields.get("memlock")]
    if memlock:
        found.append(
            (
                0.85,
                "RDMA memory registration failed: locked memory exhausted",
                memlock,
                _MEMLOCK_FIX,
            )
        )
    elif verbs:
        call = verbs[0][1].fields.get("call", "an ibverbs call")
        reason = verbs[0][1].fields.get("reason")
        found.append(
            (
                0.85 if limits and call == "ibv_reg_mr" else 0.8,
                f"{call} failed" + (f" ({reason})" if reason else ""),
                verbs,
                _MEMLOCK_FIX if call in ("ibv_reg_mr", "ibv_create_qp") and limits else _QP_FIX,
            )
        )
    if memlock_warning and not verbs:
        found.append(
            (0.6, "the locked-memory limit is too low for RDMA", memlock_warning, _MEMLOCK_FIX)
        )
    elif limits and not verbs:  # `ulimit -a` pasted: a fact, if the job uses RDMA at all
        what = f"the locked-memory limit is {limits[0][1].fields['bytes'] >> 10} KB (ulimit -l)"
        found.append((0.35, what, limits, _MEMLOCK_FIX))
    ports = view.of("ib.port_down")
    if ports:
        found.append((0.4, "an InfiniBand/RoCE port on this host is not up", ports, _PORT_FIX))
    counts = view.of("nccl.net_device_counts")
    if counts:
        fields = counts[0][1].fields
        what = (
            f"the nodes see different numbers of network devices (from {fields['min']} to"
            f" {fields['max']}): some node's NICs are missing, down or hidden"
        )
        found.append((0.7, what, counts, _NICS_FIX))
    events = view.of("nccl.ib_async_event")
    if events:
        found.append((0.8, "the InfiniBand device reported a fault", events, _QP_FIX))
    completions = view.of("nccl.ib_completion_error")
    if completions:
        status = completions[0][1].fields.get("status")
        name = completions[0][1].fields.get("status_name") or f"status {status}"
        peers = sorted({str(s.fields["peer"]) for _, s in completions if s.fields.get("peer")})
        toward = f" toward {', '.join(peers[:4])}" if peers else ""
        if view.origins:
            confidence = 0.4
        elif status == 5:  # a flushed request follows an earlier error
            confidence = 0.45
        else:
            confidence = 0.7
        found.append(
            (
                confidence,
                f"InfiniBand work requests completed with {name}{toward}",
                completions,
                "Check the links of the named peer hosts (`ibstat`, switch counters), then "
                + _QP_FIX[0].lower()
                + _QP_FIX[1:],
            )
        )
    ofi = view.of("nccl.ofi_error")
    if ofi:
        what = str(ofi[0][1].fields.get("what", "a request failed"))
        found.append(
            (
                0.4 if view.origins else 0.6,
                f"NCCL's OFI (libfabric/EFA) plugin: {what[:1].lower() + what[1:]}",
                ofi,
                _OFI_FIX,
            )
        )
    fabric = view.of("nccl.ofi_warn", "libfabric.warn", "ib.kernel_device_error")
    if fabric and not found:
        enomem = [item for item in fabric if _ENOMEM.search(item[1].text)]
        what = str(fabric[0][1].fields.get("what") or fabric[0][1].text).strip()[:120]
        found.append(
            (0.6, "RDMA memory registration ran out of locked memory", enomem, _MEMLOCK_FIX)
            if enomem
            else (
                # a host without EFA prints them too and goes on over sockets (2 of the
                # cloud sweep's 30 such pastes, 21 the fabric's): a failure more often than not
                0.4 if view.origins else 0.5,
                f"the EFA/libfabric transport reported a failure ({what})",
                fabric,
                _OFI_FIX,
            )
        )
    warned = view.of("nccl.ib_warn")
    if warned and not found:
        what = str(warned[0][1].fields["what"]).strip()[:120]
        found.append(
            (0.5, f"NCCL's InfiniBand transport reported a failure ({what})", warned, _QP_FIX)
        )
    if view.multi_host and view.stalled_in_setup() and view.uses_ib():
        found.append(
            (
                0.4,
                "a multi-host NCCL job over InfiniBand stops during communicator setup",
                view.of("nccl.ib_devices", "nccl.init"),
                _QP_FIX,
            )
        )
    return found
