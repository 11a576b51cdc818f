"""Cause IDs: the stable vocabulary every hypothesis uses.

IDs are API (tests, JSON consumers and playbooks key on them): add, never rename.
"""

from __future__ import annotations

CAUSES: dict[str, str] = {
    "hang.mismatched_collective": (
        "ranks sit in different collectives, or in the same op from different call sites (conditional collective, different order)"
    ),
    "hang.rank_not_in_collective": (
        "some ranks wait in a collective while others are elsewhere (compute loop, data loading, I/O, a lock, a breakpoint)"
    ),
    "hang.rank_exited": (
        "a rank died or returned (crash, killed, finished early) while peers wait"
    ),
    "hang.uneven_inputs": (
        "ranks ran different numbers of steps (uneven data shards); one is past the loop (final barrier, checkpoint, destroy)"
    ),
    "hang.p2p_deadlock": (
        "send/recv ordering deadlock (both send or both recv first; unmatched pair)"
    ),
    "hang.subgroup_mismatch": (
        "a collective on a process group that not every member enters, or new_group called by only some ranks"
    ),
    "hang.shape_mismatch": "same collective, different tensor sizes/dtypes across ranks",
    "hang.collective_timeout": "a collective timed out, cause not yet visible (next: stacks / FR)",
    "hang.unknown": "stalled, no cause visible",
    "comm.wrong_interface": (
        "NCCL/Gloo picked or was told a wrong/absent network interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, docker0/lo, multi-homed hosts)"
    ),
    "comm.shm_exhausted": "/dev/shm too small or unavailable (containers default 64 MB)",
    "comm.infiniband": (
        "IB/RoCE fabric or config fault (HCA, port down, GID index, NCCL_IB_* settings, memlock ulimit)"
    ),
    "comm.p2p_unsupported": (
        "GPU peer-to-peer path broken (IOMMU/ACS, virtualization); NCCL_P2P_DISABLE works around"
    ),
    "comm.rendezvous": (
        "MASTER_ADDR/PORT unreachable or in use, TCPStore/rendezvous timeout, hostname resolution, firewall"
    ),
    "comm.version_mismatch": (
        "NCCL/torch/CUDA driver versions differ across ranks or are incompatible"
    ),
    "comm.nccl_env_override": (
        "an NCCL_* setting forces a transport, topology or algorithm that does not fit the hardware (NCCL_GRAPH_FILE, NCCL_TOPO_FILE, NCCL_ALGO, NCCL_PROTO, NCCL_P2P_LEVEL, NCCL_IB_DISABLE, ...)"
    ),
    "comm.peer_failure": (
        "this rank failed because a remote rank died or reset the connection; root cause is on the peer"
    ),
    "comm.fabric": (
        "the GPU fabric is not up: NVSwitch fabric manager stopped or its version differs from the driver, NVLink down (NCCL hangs or fails at init on multi-GPU hosts)"
    ),
    "comm.unknown": "the symptom is visible but not its cause; the report says what is missing",
    "oom.fragmentation": (
        "much memory reserved but unallocated; allocator fragmentation (expandable_segments helps)"
    ),
    "oom.same_device": (
        "several ranks allocate on one GPU: missing set_device, LOCAL_RANK misuse, or torch.load without map_location restoring every rank's state onto cuda:0"
    ),
    "oom.capacity": (
        "the working set does not fit: params/grads/optimizer/activations too large for the parallelism used"
    ),
    "oom.collective_peak": (
        "peak from all_gather / unsharded params (FSDP/ZeRO reshard settings, gathered outputs)"
    ),
    "oom.leak": "memory grows step over step (holding graphs or tensors across steps)",
    "oom.other_process": "another process holds the GPU's memory (stale job, zombie)",
    "oom.host": "host RAM or container limit (OOM killer, SIGKILL, dataloader workers)",
    "oom.unknown": "the symptom is visible but not its cause; the report says what is missing",
    "wrong.unsynced_grads": (
        "gradients not reduced across ranks (no DDP/FSDP wrap, no_sync misuse, missing all_reduce) so replicas diverge"
    ),
    "wrong.unused_parameters": "DDP parameters without gradients (unused in forward on some ranks)",
    "wrong.placement": (
        "DTensor / TP placements wrong (Shard vs Replicate, Partial not reduced, mesh dim mix-up)"
    ),
    "wrong.init_mismatch": "replicas start from different weights (seed or broadcast missing)",
    "wrong.seeding": (
        "per-rank random streams wrong: identical where they must differ (augmentation, dropout, shuffling) or different where they must match"
    ),
    "wrong.eval_sharding": (
        "distributed evaluation counts samples twice or misses some (DistributedSampler padding, uneven split, gather without de-duplication)"
    ),
    "wrong.nondeterminism": "runs differ from nondeterministic kernels or unseeded randomness",
    "wrong.batchnorm_sync": "BatchNorm statistics not synchronized (needs SyncBatchNorm)",
    "wrong.reduction_scaling": (
        "loss/gradient scaled wrongly (sum vs mean, world size applied twice or never)"
    ),
    "wrong.nan": "NaN/Inf appear on some ranks",
    "wrong.unknown": "the symptom is visible but not its cause; the report says what is missing",
    "config.world_size_mismatch": "mesh shape, WORLD_SIZE, nproc and node counts disagree",
    "config.device_assignment": (
        "wrong device per rank (CUDA_VISIBLE_DEVICES, LOCAL_RANK vs RANK, duplicate GPU)"
    ),
    "config.backend_device": (
        "backend cannot serve the tensor's device or op (e.g. NCCL with CPU tensors, gloo op unsupported)"
    ),
    "config.launcher_args": (
        "launcher and script disagree on arguments or env (--local-rank vs --local_rank, LOCAL_RANK env vs argv)"
    ),
    "config.env_missing": "required launcher env absent or inconsistent (MASTER_ADDR, RANK, ...)",
    "config.ddp_reducer": (
        "DDP's reducer cannot follow the backward graph: a parameter marked ready twice (reentrant activation checkpointing, a module or parameter used twice in forward), graph changes under static_graph"
    ),
    "config.unknown": "the symptom is visible but not its cause; the report says what is missing",
}


def is_cause(cause_id: str) -> bool:
    return cause_id in CAUSES


#: The symptom each family of cause IDs belongs to. A symptom has one name everywhere: the
#: command, `--symptom`, its playbook, reports and MCP.
SYMPTOM_OF_FAMILY = {
    "hang": "hang",
    "comm": "comm-error",
    "oom": "oom",
    "wrong": "wrong-results",
    "config": "config",
}
SYMPTOMS = tuple(SYMPTOM_OF_FAMILY.values())


def symptom_of(cause_id: str) -> str:
    family = cause_id.split(".", 1)[0]
    return SYMPTOM_OF_FAMILY.get(family, family)


def canonical_symptom(name: str) -> str:
    """A symptom's one name from any spelling earlier versions used (`comm`, `comm_error`,
    `Wrong_Results`); a name no symptom has comes back as typed, for the caller to refuse."""
    key = name.strip().lower().replace("_", "-")
    return SYMPTOM_OF_FAMILY.get(key, key)
