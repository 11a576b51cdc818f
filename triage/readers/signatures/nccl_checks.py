"""NCCL's own checks across the ranks and of the host, in the words of its WARN lines: two
NCCL releases in one communicator, a CUDA too old for it, nodes with different network
devices, NVLink peers it finds disabled, a multi-node NVLink domain it cannot use, and
ranks sharing a GPU, a collective's buffer on another GPU than its communicator's, a
library older than the code compiled against it, float8 reductions on a GPU before Hopper.
Each names its cause outright (checked against NCCL's sources: init.cc, ras/ras.cc,
include/alloc.h, transport/net_socket.cc, bootstrap.cc, mnnvl.cc, graph/paths.cc,
transport/nvls.cc, misc/argcheck.cc, dev_runtime.cc, enqueue.cc)."""

from __future__ import annotations

from triage.readers.signatures import signature

# init.cc compares every peer's NCCL version; RAS compares a remote peer's.
signature(
    "nccl.versions_differ",
    r"Mismatched NCCL version detected : rank (?P<rank_a>\d+) version (?P<version_a>\d+) rank"
    r" (?P<rank_b>\d+) version (?P<version_b>\d+)"
    r"|NCCL version mismatch with remote peer (?P<peer>\S+) \(local: (?P<local>[\w.]+),"
    r" remote:? (?P<remote>[\w.]+)\)",
    anchors=("Mismatched NCCL version detected", "NCCL version mismatch with remote peer"),
    summary="NCCL found ranks of one communicator running different NCCL releases",
)

signature(
    "nccl.cuda_too_old",
    r"CUMEM(?: Host)? (?:is )?not supported prior to CUDA (?P<needed>[\d.]+)"
    r"|CUDA Driver version found is (?P<found>\d+)\. Minimum requirement is (?P<minimum>\d+)",
    anchors=("not supported prior to CUDA", "Minimum requirement is"),
    summary="NCCL needs a newer CUDA driver than the host has",
)

# NCCL's socket transport and its out-of-band bootstrap network, with no interface to use.
signature(
    "nccl.no_net_interface",
    r"NET/Socket : no interface found"
    r"|no device found (?:matching|after excluding) (?:exactly )?(?P<ifname>\S+?),"
    r" verify NCCL_OOB_NET_IFNAME",
    anchors=("NET/Socket : no interface found", "verify NCCL_OOB_NET_IFNAME"),
    summary="NCCL found no network interface its socket or bootstrap settings allow",
)

# init.cc: the ranks see different numbers of network devices (a node whose NICs are
# missing, down or hidden: InfiniBand on some nodes only).
signature(
    "nccl.net_device_counts",
    r"Detected mixed local Net device counts across ranks \(min (?P<min>\d+), max (?P<max>\d+)\)",
    anchors="Detected mixed local Net device counts",
    summary="the ranks' nodes see different numbers of network devices (NICs missing on some)",
)

signature(
    "nccl.p2p_disabled_nvlink",
    r"P2P is disabled between NVLINK connected GPUs (?P<gpu_a>\d+) and (?P<gpu_b>\d+)",
    anchors="P2P is disabled between NVLINK connected GPUs",
    summary="CUDA reports peer access off between GPUs that NVLink connects (a hardware fault)",
)

# Multi-node NVLink (GB200 NVL72 and the like) needs the IMEX service and its channels.
signature(
    "nccl.mnnvl_unusable",
    r"MNNVL \(cliqueSize (?P<clique>\d+)\) is available but not working on this system",
    anchors="is available but not working on this system",
    summary="multi-node NVLink is present but unusable: the IMEX service or channels are missing",
)

signature(
    "nccl.nvls_shared_device",
    r"communicator has multiple ranks using the same NVML device",
    anchors="multiple ranks using the same NVML device",
    summary="NVLS is forced on while several ranks of the communicator share one GPU",
)

# init.cc (NCCL 2.27+) refuses ranks of one communicator on one GPU unless told otherwise.
signature(
    "nccl.ranks_share_gpu",
    r"Multiple Ranks are using the same GPU/Partition",
    anchors="Multiple Ranks are using the same GPU",
    summary="NCCL found several ranks of one communicator on the same GPU",
)

# argcheck.cc: `AllReduce : sendbuff allocated on device 1 mismatchs with NCCL device 0`.
signature(
    "nccl.buffer_on_other_gpu",
    r"(?P<op>\w+) : (?P<buffer>\w+) allocated on device (?P<on>\d+) mismatchs with NCCL device"
    r" (?P<nccl>\d+)",
    anchors="mismatchs with NCCL device",
    summary="a collective's buffer lives on another GPU than the rank's NCCL communicator",
)

# dev_runtime.cc / devcomm: the libnccl loaded at run time is older than the headers the
# application (or a library such as torch) was compiled against.
signature(
    "nccl.library_too_old",
    r"NCCL library is too old|NCCL library is not backwards compatible"
    r"|compiled with too old version of NCCL",
    anchors=("NCCL library is", "too old version of NCCL"),
    summary="the libnccl loaded at run time is older than the one the code was built against",
)

# enqueue.cc: NCCL's float8 reductions need compute capability 9.0.
signature(
    "nccl.fp8_reduction_needs_sm90",
    r"FP8 reduction support begins with sm90",
    anchors="FP8 reduction support begins with sm90",
    summary="NCCL reduces float8 only on Hopper (sm90) or newer GPUs",
)
