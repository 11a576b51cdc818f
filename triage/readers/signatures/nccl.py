"""NCCL: what it set up (NCCL_DEBUG=INFO facts) and how it failed (WARN lines, error codes).

Facts come first because a comm failure is read against them: which interface the
bootstrap and the socket transport picked, whether InfiniBand was found, which
transport each channel uses (P2P, SHM, NET), which NCCL_* variables the environment
forced, the library version and each communicator's `Init START`/`Init COMPLETE` with
its rank. Init lines tie the `host:pid:tid [dev]` prefix to a rank, so every other line
of that process is attributed too.

Failures come in two layers. NCCL itself prints `NCCL WARN <what failed>`; torch wraps
the result code as `NCCL error in: ...ProcessGroupNCCL.cpp:N, unhandled system error
(...), NCCL version X` followed by `ncclSystemError: ...` and `Last error:` with NCCL's
last WARN text on the next line. The specific signatures below match the WARN text
itself, so they fire on the WARN line and on its copy after `Last error:` alike.

The shared-memory lines that are not NCCL's own (DataLoader workers out of /dev/shm,
torch's shared-memory files) live here too: they fail the same intra-host transports and
are read by the same rules. Versions and drivers are in versions.py.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.net_interfaces import is_virtual_interface
from triage.readers.signatures import signature


def address_kind(address: str) -> str | None:
    """'loopback', 'docker' or 'link-local' for addresses that cannot reach another host."""
    host = address.strip("[]").lower()
    if host.startswith(("127.", "::1", "localhost")):
        return "loopback"
    if host.startswith("172.17.0."):
        return "docker"
    if host.startswith(("fe80:", "169.254.")):
        return "link-local"
    return None


# --- facts (NCCL_DEBUG=INFO) ------------------------------------------------------------

signature(
    "nccl.version",
    r"\b(?P<library>NCCL|RCCL) version\s*:?\s*(?P<version>\d+\.\d+\.\d+)(?:[+-](?P<build>\S+?))?(?=[\s,;)]|$)",
    anchors=("NCCL version", "RCCL version"),
    summary="the NCCL library version a process loaded (INFO banner or torch's error text)",
)


def _bootstrap(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"virtual": is_virtual_interface(found["interface"])}
    kind = address_kind(found["address"])
    if kind:
        out["address_kind"] = kind
    return out


signature(
    "nccl.bootstrap_interface",
    # NCCL 2.3 named each interface it took on a line: `NET : Using interface lo:127.0.0.1<0>`
    r"(?:Bootstrap ?: Using|NET : Using interface) (?P<interface>[\w.\-@]+?):(?P<address>[^\s<]+)<\d+>",
    anchors=("Bootstrap : Using", "Bootstrap: Using", "NET : Using interface"),
    summary="the interface NCCL's bootstrap (out-of-band) network uses",
    extract=_bootstrap,
)

_IF_ENTRY = re.compile(r"\[\d+\](?P<name>[^:\s\[]+):(?P<address>[^\s<]+)<")


def _interfaces(found: re.Match[str]) -> dict[str, Any]:
    entries = _IF_ENTRY.findall(found["listing"])
    names = [name for name, _ in entries]
    return {
        "interfaces": names,
        "addresses": [address for _, address in entries],
        "virtual": [n for n in names if is_virtual_interface(n)],
    }


signature(
    "nccl.socket_interfaces",
    r"NET/Socket ?: Using (?P<listing>\[\d+\].*)",
    anchors=("NET/Socket : Using", "NET/Socket: Using"),
    summary="the interfaces NCCL's socket transport uses",
    extract=_interfaces,
)

signature(
    "nccl.ib_devices",
    r"NET/IB ?: Using (?P<devices>\[\d+\][^;]*)(?:; OOB (?P<oob_interface>[\w.\-@]+?):(?P<oob_address>[^\s<]+)<\d+>)?",
    anchors=("NET/IB : Using", "NET/IB: Using"),
    summary="the InfiniBand/RoCE devices NCCL found, and the out-of-band interface",
    extract=lambda found: {"hcas": re.findall(r"\[\d+\]([^:\s]+)", found["devices"])},
)

signature(
    "nccl.ib_absent",
    r"NET/IB ?: No device found",
    anchors=("NET/IB : No device found", "NET/IB: No device found"),
    summary="NCCL found no InfiniBand device and falls back to sockets",
)

signature(
    "nccl.network",
    r"Using (?:internal )?[Nn]etwork (?P<network>\w+)",
    anchors=("Using network ", "Using internal Network "),
    summary="the network plugin NCCL uses between hosts (Socket, IB, a vendor plugin)",
)

_CHANNEL = (
    r"(?:Channel|Ring) \d+(?:/\d+)? : (?P<src>\d+)(?:\[[^\]]*\])? -> (?P<dst>\d+)(?:\[[^\]]*\])?"
    r"(?: \[(?:send|receive)\])? via "
)

signature(
    "nccl.channel_p2p",
    _CHANNEL + r"P2P(?:/(?P<mode>\S+))?",
    anchors="via P2P",
    summary="a channel uses GPU peer-to-peer (NVLink/PCIe P2P, CUDA IPC) between local GPUs",
)

signature(
    "nccl.channel_shm",
    _CHANNEL + r"(?:SHM(?:/(?P<mode>\S+))?|direct shared memory)",
    anchors=("via SHM", "via direct shared memory"),
    summary="a channel uses host shared memory (/dev/shm) between local GPUs",
)

signature(
    "nccl.channel_net",
    _CHANNEL + r"NET/(?P<network>[A-Za-z_]+)\S*",
    anchors="via NET/",
    summary="a channel crosses hosts over the network transport",
)

signature(
    "nccl.env_override",
    r"\b(?P<variable>NCCL_[A-Z0-9_]+) set by environment to (?P<value>.*?)\.?\s*$",
    anchors="set by environment to",
    summary="an NCCL_* variable set in the environment overrides NCCL's own choice",
)


# NCCL reads a topology XML instead of probing the machine when NCCL_TOPO_FILE names one
# (in the environment, in /etc/nccl.conf, or from an image or a network plugin): the
# setting is in force even where NCCL_DEBUG_SUBSYS leaves out its `set by environment` line.
signature(
    "nccl.topology_file",
    r"NCCL INFO Loading topology file (?P<value>\S+)",
    anchors="Loading topology file",
    summary="NCCL took its topology from an XML file instead of probing the machine",
    extract=lambda m: {"variable": "NCCL_TOPO_FILE"},
)


def _init(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"rank": int(found["rank"]), "nranks": int(found["nranks"])}
    for key, pattern in (("cuda_dev", r"cudaDev (\d+)"), ("bus_id", r"busId ([0-9a-fA-F]+)")):
        value = re.search(pattern, found["detail"])
        if value:
            out[key] = value.group(1)
    return out


signature(
    "nccl.init",
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+)(?P<detail>.*?)"
    r" - Init (?P<stage>START|COMPLETE)",
    anchors=("- Init START", "- Init COMPLETE"),
    summary="an NCCL communicator's setup started or completed on a rank",
    extract=_init,
)

signature(
    "nccl.comm_topology",
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) "
    r"nNodes (?P<nnodes>\d+) localRanks (?P<local_ranks>\d+)",
    anchors="nNodes ",
    summary="how many hosts (nNodes) and local ranks an NCCL communicator spans",
    extract=lambda found: {"nnodes": int(found["nnodes"]), "nranks": int(found["nranks"])},
)

signature(
    "nccl.iommu",
    # RCCL's checks of the host (ROCm): `Missing "amd_iommu=on" from kernel command line`,
    # `Missing "HSA_FORCE_FINE_GRAIN_PCIE=1" from environment`
    r"Missing \"?(?:iommu=pt|amd_iommu=on|HSA_FORCE_FINE_GRAIN_PCIE=1)\"? from (?:kernel command"
    r" line|environment)",
    anchors=("iommu=pt", "amd_iommu=on", 'HSA_FORCE_FINE_GRAIN_PCIE=1" from environment'),
    summary="the kernel runs with the IOMMU translating GPU traffic, which can break or hang P2P",
)

# --- failures ---------------------------------------------------------------------------

signature(
    "nccl.warn",
    r"NCCL WARN (?P<message>.+)",
    anchors="NCCL WARN",
    summary="NCCL warned about something it could not do",
)

# Horovod and other callers of NCCL's API print the call and its error string:
# `ncclCommInitRank failed: unhandled cuda error`.
_ERROR_KINDS = {
    "unhandled system error": "system",
    "ncclSystemError": "system",
    "unhandled cuda error": "cuda",
    "ncclUnhandledCudaError": "cuda",
    "internal error": "internal",
    "ncclInternalError": "internal",
    "invalid usage": "invalid_usage",
    "ncclInvalidUsage": "invalid_usage",
    "invalid argument": "invalid_argument",
    "ncclInvalidArgument": "invalid_argument",
}


def _nccl_error(found: re.Match[str]) -> dict[str, Any]:
    return {"kind": _ERROR_KINDS[found["text"] or found["code"]]}


signature(
    "nccl.error",
    r"(?:(?:NCCL (?:error|Error)(?: \d+)?(?: in: (?P<where>\S+?))?[:,]|NCCL failure \S+ '"
    r"|\bnccl[A-Z]\w+ failed:)"
    r"\s*(?P<text>unhandled system error"
    r"|unhandled cuda error|internal error|invalid usage|invalid argument)"
    r"|\b(?P<code>ncclSystemError|ncclUnhandledCudaError|ncclInternalError|ncclInvalidUsage"
    r"|ncclInvalidArgument)\b)",
    anchors=(
        "NCCL error",
        "NCCL Error",
        "ncclSystemError",
        "ncclUnhandledCudaError",
        "ncclInternalError",
        "ncclInvalidUsage",
        "ncclInvalidArgument",
        "NCCL failure",
        # Horovod's words for NCCL's result: `ncclCommInitRank failed: internal error`
        "failed: unhandled",
        "failed: internal error",
        "failed: invalid usage",
        "failed: invalid argument",
    ),
    summary="an NCCL call failed with a result code (system, CUDA, internal, usage error)",
    extract=_nccl_error,
)

# NCCL_DEBUG=INFO traces a failed call back up its callers, one line per frame: `INFO
# bootstrap.cc:270 -> 2`, the number an ncclResult_t (1 CUDA, 2 system, 3 internal, 4 invalid
# argument, 5 invalid usage, 6 remote error). The innermost file says where it failed.
signature(
    "nccl.error_trace",
    # older NCCL traces through its headers and .cu files too (`include/shm.h:41 -> 2`)
    r"NCCL INFO (?P<file>[\w/.]+\.(?:cc|h|cu)):(?P<line>\d+) -> (?P<code>[1-6])\b",
    anchors=(".cc:", ".h:", ".cu:"),
    summary="NCCL traces a failed call back through its source (file:line -> result code)",
    extract=lambda found: {"file": found["file"], "code": int(found["code"])},
)

# nccl-tests (all_reduce_perf & co.): the ranks it runs, then one row per message size.
# A header with no row after it is a test stuck in its first collective.
signature(
    "nccl.tests_rank",
    r"^#\s+Rank\s+(?P<test_rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)",
    anchors="Pid ",
    summary="nccl-tests names a rank it runs: its process, host and GPU (one process may run"
    " several ranks, so the rank ties no pid)",
    extract=lambda found: {"test_rank": int(found["test_rank"]), "device": int(found["device"])},
)

signature(
    "nccl.tests_result",
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?:float|half|bfloat16|double|u?int(?:8|32|64)|fp8\w*)"
    r"\s+\w+\s+-?\d+\s+[\d.]+",
    anchors=(" float ", " half ", " bfloat16 ", " double ", "int8 ", "int32 ", "int64 ", " fp8"),
    summary="nccl-tests measured one message size (a row of its table)",
)


signature(
    "nccl.remote_error",
    r"ncclRemoteError|remote process exited or there was a network error",
    anchors=("ncclRemoteError", "remote process exited or there was a network error"),
    summary="NCCL lost a peer: a remote process exited or the network dropped",
    peer_symptom=True,
)

signature(
    "nccl.socket_closed",
    r"Connection closed by remote peer(?: (?P<peer>[^\s<]+)(?:<(?P<port>\d+)>)?)?",
    anchors="Connection closed by remote peer",
    summary="the process on the other end of an NCCL socket closed it (it exited or aborted)",
    peer_symptom=True,
)


def _connect(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    reason = found["reason"] or found["returned"] or found["retry"]
    if reason:
        out["reason"] = reason.strip()
    if found["address"]:
        kind = address_kind(found["address"])
        if kind:
            out["address_kind"] = kind
    return out


signature(
    "nccl.connect_failed",
    r"(?:Connect to (?P<address>[^\s<]+)<(?P<port>\d+)> (?:failed\s*:\s*(?P<reason>.+?)"
    r"|returned (?:\d+\()?(?P<returned>[^)]+)\)?.*?)"
    r"|Call to connect returned (?P<retry>[^,]+)(?:, retrying)?)\s*$",
    anchors=("Connect to ", "Call to connect returned"),
    summary="NCCL could not open a socket to a peer (refused, unreachable, aborted, timed out)",
    extract=_connect,
)

# NCCL's socket() on the interface it chose fails with EAFNOSUPPORT: an IPv6 address picked
# in a container or kernel without IPv6 (or no IP interface at all inside the container).
signature(
    "nccl.socket_family",
    r"Socket creation failed\s*:\s*Address family not supported by protocol",
    anchors="Address family not supported by protocol",
    summary="NCCL cannot open a socket of the address family of the interface it chose",
)

# plugin/net.cc: no network transport opened, the built-in socket one included. It opens
# on any host with an interface, so NCCL_NET must have named one that cannot (IB without
# its devices in the container, an OFI/gIB plugin not on the library path or built for
# another NCCL): torch then raises `invalid usage` with this as its `Last error:`.
signature(
    "nccl.no_net_plugin",
    r"Failed to initialize any NET plugin",
    anchors="Failed to initialize any NET plugin",
    summary="NCCL could open none of its network transports (NCCL_NET names one this host lacks)",
)

signature(
    "nccl.no_interface",
    r"(?:no socket interface found|No usable listening interface found"
    r"|No interface found in the same subnet as remote address (?P<remote>\S+)"
    # GCP's GPUDirect-TCPX and TCPXO (FasTrak) net plugins: `NET/GPUDirectTCPX : no ctrl
    # interface found`, `NET/FasTrak ...: No interfaces found for ctrl dev name eth9`
    r"|NET/(?P<plugin>GPUDirectTCPX|FasTrak)\b.*?:\s*[Nn]o (?:ctrl )?interfaces? found)",
    anchors=(
        "no socket interface found",
        "No socket interface found",
        "No usable listening interface found",
        "No interface found in the same subnet",
        "NET/GPUDirectTCPX",
        "NET/FasTrak",
    ),
    summary="NCCL found no usable network interface (NCCL_SOCKET_IFNAME names none that exists)",
)

# vLLM over Ray counts its nodes by IP: two nodes that report the same address (VLLM_HOST_IP
# set alike on every node, containers on a bridge network) or one node under two.
signature(
    "vllm.node_ips",
    r"Every node should have a unique IP address\. Got (?P<nodes>\d+) nodes? with node ids"
    r" \[[^\]]*\] and (?P<ips>\d+) unique IP address",
    anchors="Every node should have a unique IP address",
    summary="vLLM found its Ray nodes' IP addresses not one per node (the address each uses)",
)

signature(
    "nccl.message_truncated",
    r"Message truncated\s*:?\s*received (?P<received>\d+) bytes instead of (?P<expected>\d+)",
    anchors="Message truncated",
    summary="a bootstrap peer sent a message of the wrong size (mismatched NCCL builds or a foreign job)",
)


def _net_sizes(found: re.Match[str]) -> dict[str, Any]:
    received = found["received"] or found["remote"]
    expected = found["expected"] or found["local"]
    return {"received": received, "expected": expected}


# NCCL's network transports check each message against the receive the rank posted: a peer
# that sends more than this rank's collective holds means the ranks called collectives of
# different sizes (or with different NCCL_PROTO/NCCL_ALGO); NCCL >= 2.12 says so, and
# returns ncclInvalidUsage.
signature(
    "nccl.net_size_mismatch",
    r"NET/\w+ : (?:peer \S+ )?message truncated : receiving (?P<received>\d+) bytes instead of"
    r" (?P<expected>\d+)|NET/\w+ : req \d+/\d+ tag \w+ peer \S+ collective mismatch error,"
    r" local size (?P<local>\d+) remote size (?P<remote>\d+)",
    anchors=("message truncated : receiving", "collective mismatch error, local size"),
    summary="a peer sent more bytes than this rank's collective holds: the ranks' collectives"
    " differ in size",
    extract=_net_sizes,
)

# --- shared memory ----------------------------------------------------------------------


def _shm(found: re.Match[str]) -> dict[str, Any]:
    reason = next((found[k] for k in ("r1", "r2", "r3", "r4") if found[k]), None)
    return {"reason": reason.strip()} if reason else {}


signature(
    "nccl.shm_failed",
    r"(?:Call to posix_fallocate failed\s*:?\s*(?P<r1>[^(]*)"
    r"|failed to extend (?P<path>\S+) to (?P<bytes>\d+) bytes(?:, error: (?P<r2>[^(]+))?"
    r"|Error while (?P<op>creating|attaching to) shared memory segment (?P<segment>\S+)"
    r"(?: \(size (?P<size>\d+)\))?(?:, error: (?P<r3>[^(]+))?"
    r"|failed to create shared memory file (?P<file>\S+), error (?P<r4>[^(]+)"
    r"|Could not map (?P<mapped>/dev/shm/\S+) size (?P<map_size>\d+))",
    anchors=(
        "posix_fallocate failed",
        "failed to extend",
        "shared memory segment",
        "failed to create shared memory file",
        "Could not map /dev/shm",
    ),
    summary="NCCL could not create or map its /dev/shm segment (shared memory full or absent)",
    extract=_shm,
)

signature(
    "shm.no_space",
    r"(?:/dev/shm|\bshm\b|shared memory).*No space left on device"
    r"|No space left on device.*(?:/dev/shm|shared memory)",
    anchors="No space left on device",
    summary="a write to shared memory (/dev/shm) failed: no space left",
)

signature(
    "shm.torch_file",
    r"unable to (?P<op>write to file|mmap \d+ bytes from file|open shared memory object"
    r"|allocate shared memory\(shm\) for file|resize file) <(?P<file>[^>]*)>"
    r"(?:[^:\n]*:\s*(?P<reason>[^(]*?)\s*(?:\((?P<errno>\d+)\))?)?\s*$",
    anchors=(
        "unable to write to file <",
        "unable to mmap ",
        "unable to open shared memory object <",
        "unable to allocate shared memory(shm)",
        "unable to resize file <",
    ),
    summary="torch could not create a tensor's shared-memory file (DataLoader workers, CPU sharing)",
)

# Ray measures /dev/shm when it starts its object store (vLLM, verl and Ray Train jobs start
# Ray), and its raylet says when a request does not fit: the container's /dev/shm size.
signature(
    "shm.ray_small",
    r"object store is using /tmp instead of /dev/shm because /dev/shm has only (?P<bytes>\d+)"
    r" bytes available",
    anchors="instead of /dev/shm because /dev/shm has only",
    summary="Ray found /dev/shm small (the container's default 64 MB, or little free)",
    extract=lambda found: {"bytes": int(found["bytes"])},
)

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

# `df -h` of a container's /dev/shm (`shm  64M  0  64M  0% /dev/shm`; Docker's own view names
# the container's shm mount): its size, Docker's 64 MB default unless the container set one.
signature(
    "shm.df_size",
    r"^\s*\*?(?:shm|tmpfs|none)\s+(?P<size>\d+(?:\.\d+)?)(?P<unit>[KMGT])\s+\S+\s+\S+\s+\d+%"
    r"\s+(?:/dev/shm|/\S+/shm)\s*$",
    anchors="shm",
    summary="df shows the size of /dev/shm (a container's default is 64 MB)",
    extract=lambda found: {"bytes": int(float(found["size"]) * _UNITS[found["unit"]])},
)

signature(
    "shm.ray_request",
    r"System memory request exceeds memory available in /dev/shm\.(?: The request is for"
    r" (?P<request>\d+) bytes, and the amount available is (?P<bytes>\d+) bytes)?",
    anchors="System memory request exceeds memory available in /dev/shm",
    summary="Ray's object store asked /dev/shm for more than it holds",
)

signature(
    "shm.dataloader_bus_error",
    r"Unexpected bus error encountered in worker|insufficient shared memory \(shm\)"
    r"|killed by signal: Bus error|workers are out of shared memory",
    anchors=(
        "Unexpected bus error encountered in worker",
        "insufficient shared memory",
        "killed by signal: Bus error",
        "out of shared memory",
    ),
    summary="a DataLoader worker hit a bus error: /dev/shm is too small for its batches",
)

# --- GPU peer-to-peer -------------------------------------------------------------------

signature(
    "nccl.p2p_failed",
    r"(?P<what>peer access is not supported between these two devices"
    r"|failed to open CUDA IPC handle|(?:cuda|hip)Ipc(?:Open|Get)MemHandle\w*\)? (?:failed|returned)"
    # accelerate's refusal on consumer cards without NCCL_P2P_DISABLE/NCCL_IB_DISABLE set
    r"|Using RTX (?:3090 or )?4000 series doesn't support faster communication)",
    anchors=(
        "peer access is not supported",
        "failed to open CUDA IPC handle",
        "cudaIpcOpenMemHandle",
        "cudaIpcGetMemHandle",
        # RCCL's (ROCm)
        "hipIpcGetMemHandle",
        "hipIpcOpenMemHandle",
        "Using RTX 3090 or 4000 series",
        "Using RTX 4000 series",
    ),
    summary="CUDA peer access / IPC between two local GPUs failed",
)

# --- GPU fabric: NVSwitch and its fabric manager (comm.fabric) ---------------------------
# On NVSwitch hosts (HGX/DGX A100, H100, H200, B200) CUDA cannot start until
# nvidia-fabricmanager has brought the fabric up: cudaGetDeviceCount, cuInit and NCCL then
# fail with error 802, worded per layer: torch's `Error 802: system not yet initialized`,
# NCCL's `Cuda failure 802 'system not yet initialized'`, the CUDA samples'
# `code=802(cudaErrorSystemNotReady)`, the driver API's CUDA_ERROR_SYSTEM_NOT_READY. NCCL's
# NVLink SHARP (NVLS) multicast needs the fabric manager too and says so when it cannot bind
# its memory. The fabric manager's own log (journalctl -u nvidia-fabricmanager) names a
# version that differs from the driver's, or a configuration it rejects.


def _not_ready(found: re.Match[str]) -> dict[str, Any]:
    return {"nvls": "nvls" in found.string.lower()}


signature(
    "fabric.system_not_ready",
    r"(?i:802|cuda)[^\n]{0,80}?system not yet initialized"
    r"|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY",
    anchors=(
        "system not yet initialized",
        "cudaErrorSystemNotReady",
        "CUDA_ERROR_SYSTEM_NOT_READY",
    ),
    summary="CUDA error 802: the GPUs cannot start work until the NVSwitch fabric manager is up",
    extract=_not_ready,
)

signature(
    "fabric.nvls_failed",
    r"Failed to bind NVLink SHARP \(NVLS\) Multicast memory(?: of size (?P<bytes>\d+))?"
    r"(?:[^']*?CUDA error (?P<code>\d+) '(?P<reason>[^']*)')?"
    r"|This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches"
    # NCCL >= 2.19 prints the CUDA error's number, older releases its string
    r"|transport/nvls\.cc:\d+ NCCL WARN Cuda failure (?:(?P<nvls_code>\d+)|'(?P<nvls_reason>[^']+)')",
    anchors=(
        "Failed to bind NVLink SHARP (NVLS) Multicast memory",
        "configuration error in the Fabric Manager or NVSwitches",
        "transport/nvls.cc",
    ),
    summary="NCCL could not bind NVLink SHARP multicast memory: fabric manager or NVSwitch state is broken",
)

# NCCL_DEBUG=INFO's steps of NVLS setup (multicast support found, the comm's NVLS buffers,
# binding its memory): a log whose last word is one of these stopped inside NVLS setup.
signature(
    "fabric.nvls_setup",
    r"NCCL INFO NVLS [A-Za-z]",
    anchors="NCCL INFO NVLS ",
    summary="NCCL set up NVLink SHARP (NVLS) multicast on an NVSwitch host (INFO)",
)

signature(
    "fabric.manager_version",
    r"(?:fabric manager )?NVIDIA GPU driver interface version (?P<fm_version>[\d.]+?)\.? "
    r"(?:don't|doesn't|don’t|do not|does not) match with driver version "
    r"(?P<driver_version>[\d.]+?)\.?(?=\s|$)",
    anchors="NVIDIA GPU driver interface version",
    summary="nvidia-fabricmanager refuses to start: its version differs from the NVIDIA driver's",
)

signature(
    "fabric.manager_failed",
    r"nvidia-fabricmanager\.service: (?:Control|Main) process exited, code=(?P<code>\w+), "
    r"status=(?P<status>\S+)"
    r"|nvidia-fabricmanager\.service: Failed with result '(?P<result>[\w-]+)'"
    r"|Job for nvidia-fabricmanager\.service failed"
    r"|fabric manager config file item: (?P<item>\w+) has an invalid value"
    r"|ExecStart=\S*nv-fabricmanager\b.*\(code=exited, status=(?P<exit>[^)]+)\)",
    anchors=(
        "nv-fabricmanager",
        "nvidia-fabricmanager.service: Control process exited",
        "nvidia-fabricmanager.service: Main process exited",
        "nvidia-fabricmanager.service: Failed with result",
        "Job for nvidia-fabricmanager.service failed",
        "fabric manager config file item:",
    ),
    summary="the nvidia-fabricmanager service failed to start (the NVSwitch fabric stays down)",
)
