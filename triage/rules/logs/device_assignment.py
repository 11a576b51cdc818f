"""config.device_assignment from logs: ranks sharing a GPU, or asking for one that does not
exist on their host."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view, quoted_finding
from triage.rules.logs._signals import Signal, ranks_of, signals
from triage.text import rank_label, rank_subject

_COMM_ID = re.compile(r"commId (0x[0-9a-fA-F]+)")
_DEVICE_TEXT = re.compile(r"device ordinal|set_device|busy or unavailable|Duplicate GPU|cuda")
_FIX_SHARED = (
    "Give every rank its own GPU: call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) "
    "before init_process_group (or pass device_id=torch.device('cuda', local_rank)), never a "
    "hard-coded cuda:0 or the global RANK; on multi-node jobs use LOCAL_RANK, not RANK."
)
_FIX_ORDINAL = (
    "Start as many processes per node as there are visible GPUs (--nproc-per-node equal to the "
    "GPU count, or CUDA_VISIBLE_DEVICES listing that many), and index devices with LOCAL_RANK, "
    "not RANK; when each rank sees only one GPU (per-rank CUDA_VISIBLE_DEVICES), use cuda:0."
)
_FIX_BUSY = (
    "The GPU is in exclusive-process compute mode (or held by another job): run one rank per "
    "GPU with set_device(LOCAL_RANK), free the GPU (nvidia-smi shows who holds it), or switch "
    "the compute mode to Default (`nvidia-smi -c 0`, needs root)."
)
_FIX_MIXED = (
    "Put everything a rank uses on its own GPU: torch.cuda.set_device(LOCAL_RANK) first, "
    "then `.to(device)` for the model and every batch, and torch.load(..., map_location=device)"
    " for checkpoints; a hard-coded cuda:0 or .cuda() before set_device sends it elsewhere."
)

#: Findings whose wording the signature alone decides: (signature, confidence, what, fix).
_WORDED = (
    (
        "fsdp.compute_device",
        0.7,
        "FSDP's compute device differs from the GPU the rank's tensors are on",
        "Set each rank's device before wrapping: torch.cuda.set_device(LOCAL_RANK), then"
        " FSDP(..., device_id=torch.cuda.current_device()) (or fully_shard on a mesh built after"
        " it); a model or a checkpoint loaded to cuda:0 on every rank moves there first.",
    ),
    (
        "setup.device_index_vs_local_rank",
        0.75,
        "a configured device index differs from the process's local rank",
        "Leave the device index out under a launcher (device: cuda, and each process takes"
        " cuda:LOCAL_RANK), or pick GPUs with CUDA_VISIBLE_DEVICES instead of an index in the"
        " config.",
    ),
    (
        "setup.device_shared_by_roles",
        0.8,
        "two ranks of one communicator (the trainer and the vLLM server) share one GPU",
        "Give the vLLM server and the trainer different GPUs: CUDA_VISIBLE_DEVICES for each"
        " (e.g. 0-6 for training under accelerate --num_processes 7, 7 for `trl vllm-serve`).",
    ),
    (
        "lightning.gpus_missing",
        0.75,
        "Lightning was asked for more GPUs than the process sees",
        "Ask for the GPUs the node has (Trainer(devices=...) no more than `nvidia-smi -L` lists"
        " and CUDA_VISIBLE_DEVICES leaves), or give the job those GPUs (Slurm --gpus-per-node,"
        " the container's --gpus); devices='auto' takes what is there.",
    ),
    (
        "lightning.gpus_occupied",
        0.7,
        "the GPUs Lightning picked are held by other processes",
        _FIX_BUSY,
    ),
    (
        "lightning.device_indices",
        0.75,
        "Lightning's DeepSpeed strategy got device indices other than the processes' local ranks",
        "Pick GPUs with CUDA_VISIBLE_DEVICES (e.g. CUDA_VISIBLE_DEVICES=2,3 with devices=2)"
        " instead of listing indices in Trainer(devices=[2, 3]): DeepSpeed maps each process to"
        " the GPU of its local rank.",
    ),
    (
        "setup.group_device_unknown",
        0.6,
        "ProcessGroupNCCL does not know which GPU this rank uses",
        "Bind each rank to its GPU before the first collective:"
        " torch.cuda.set_device(int(os.environ['LOCAL_RANK'])), or"
        " init_process_group(..., device_id=torch.device('cuda', local_rank)); barrier() then"
        " runs on that device (or pass device_ids=[local_rank] to it).",
    ),
    (
        "nccl.ranks_share_gpu",
        0.85,
        "several ranks of one communicator use the same GPU",
        _FIX_SHARED,
    ),
    (
        "nccl.buffer_on_other_gpu",
        0.7,
        "a collective's tensor lives on another GPU than the rank's NCCL communicator",
        "Create or move the tensors a collective takes onto the rank's own GPU"
        " (.to(f'cuda:{local_rank}')), with torch.cuda.set_device(local_rank) before"
        " init_process_group: a tensor made with device='cuda' lands on the current device,"
        " cuda:0 until it is set.",
    ),
    (
        "nccl.nvls_shared_device",
        0.8,
        "several ranks of one communicator use the same GPU (NCCL refuses it under NVLS)",
        "Give every rank its own GPU: torch.cuda.set_device(LOCAL_RANK) before the first"
        " collective (or device_id= in init_process_group), and as many processes per node as"
        " GPUs; NCCL_NVLS_ENABLE=1 cannot serve ranks that share a device.",
    ),
    (
        "setup.device_not_visible",
        0.8,
        "a rank's GPU index is past the devices CUDA_VISIBLE_DEVICES lists",
        "Start as many processes per node as CUDA_VISIBLE_DEVICES lists (--nproc-per-node equal"
        " to its length), or list as many devices as processes; a launcher or scheduler that"
        " narrows CUDA_VISIBLE_DEVICES per task (Slurm --gpus-per-task) leaves each process one"
        " GPU, cuda:0.",
    ),
    (
        "setup.fsdp_module_devices",
        0.7,
        "FSDP got a module whose parameters sit on more than one device",
        "Put the whole module on one device before wrapping it: model.to(device) (or FSDP's"
        " device_id=torch.cuda.current_device(), which moves it), and create parameters added"
        " later on that device; keep CPU offload to FSDP's CPUOffload option.",
    ),
    (
        "setup.checkpoint_on_missing_gpu",
        0.8,
        "a checkpoint's tensors name a GPU this host does not have",
        "Load checkpoints onto the rank's own device: torch.load(path,"
        " map_location=f'cuda:{local_rank}') (or map_location='cpu', then .to(device)); a"
        " checkpoint saved from another rank or another machine keeps the GPU index it was on.",
    ),
    (
        "setup.ddp_module_device",
        0.8,
        "DistributedDataParallel got device_ids for a module that is not on that GPU",
        "Move the module to the rank's GPU before wrapping it: model.to(local_rank), then"
        " DistributedDataParallel(model, device_ids=[local_rank]); for a CPU (gloo) job leave"
        " device_ids out.",
    ),
    (
        "setup.no_gpu_visible",
        0.6,
        "a rank sees no GPU at all",
        "Check what the rank itself sees: `echo $CUDA_VISIBLE_DEVICES; nvidia-smi -L` in its"
        " environment (workers inherit it from the launcher). Under Slurm ask for GPUs"
        " (--gpus-per-task or --gres=gpu:N, which set CUDA_VISIBLE_DEVICES per task); in a"
        " container pass them in (--gpus all with the NVIDIA container toolkit); a script or"
        " launcher that sets CUDA_VISIBLE_DEVICES per rank must name devices this host has.",
    ),
    (
        "setup.devices_unavailable",
        0.6,
        "the GPU refused another process (busy or unavailable)",
        _FIX_BUSY,
    ),
    (
        "setup.device_map_refused",
        0.8,
        "the model was loaded with a device_map that one process per GPU cannot take",
        "Let each process load the whole model on its own GPU: no device_map='auto' (it spreads"
        " or stacks every rank's copy over all the GPUs it sees); under ZeRO-3 no device_map and"
        " no low_cpu_mem_usage (ZeRO-3 partitions the model itself); a quantized model with"
        " device_map={'': torch.cuda.current_device()} after torch.cuda.set_device(local_rank).",
    ),
    (
        "setup.launcher_ignores_visible_devices",
        0.75,
        "the DeepSpeed runner ignored CUDA_VISIBLE_DEVICES: the job runs on other GPUs",
        "Choose the GPUs with the runner's own option (`deepspeed --include localhost:2,4,5,7`)"
        " or drop --num_gpus/--num_nodes/--include/--exclude (accelerate passes --num_gpus for"
        " you: set the GPUs in its config's gpu_ids) so that CUDA_VISIBLE_DEVICES holds.",
    ),
    (
        "launcher.slot_missing",
        0.75,
        "the DeepSpeed runner was asked for a GPU the host's slots do not have",
        "Name GPUs the way the runner counts them, 0 to the GPUs the host shows: under Slurm or"
        " a container that narrows CUDA_VISIBLE_DEVICES the runner sees them as 0..N-1, so drop"
        " --include/--exclude (and CUDA_VISIBLE_DEVICES set by hand) or name those indices; a"
        " hostfile's slots=N must cover every GPU --include asks for.",
    ),
    (
        "setup.tensor_off_bound_device",
        0.75,
        "a collective's tensor is not on the GPU its process group was bound to",
        "Give every rank its own GPU before it makes tensors or modules:"
        " torch.cuda.set_device(local_rank) first, init_process_group(...,"
        " device_id=torch.device('cuda', local_rank)), and the tensors of each collective (a"
        " DTensor's mesh, parallelize_module's module) on that device.",
    ),
    (
        "setup.device_guessed",
        0.3,
        "the process group guessed each rank's GPU from its rank (no device bound to it)",
        "Bind each rank's GPU before the first collective: torch.cuda.set_device(local_rank)"
        " and init_process_group(..., device_id=torch.device('cuda', local_rank)); the guess"
        " (GPU = rank modulo the GPUs it sees) is wrong when ranks see other GPU counts or"
        " LOCAL_RANK is not rank % GPUs, and then the first collective hangs or crashes.",
    ),
    (
        "setup.local_rank_device_count",
        0.7,
        "LOCAL_RANK is not rank % device count, which the code assumes for its GPU",
        "Give every node the same number of GPUs (processes per node), or launch with a"
        " launcher whose LOCAL_RANK equals rank % GPUs per node (torchrun numbers ranks node by"
        " node); a hostfile with unequal slots per node breaks it.",
    ),
)


#: Other set-up failures NCCL returns as `invalid usage` (NCCL 2.28's bootstrap finding no
#: interface, no network transport opening): with one of them named, the result code is
#: theirs, not a sign of two ranks on one GPU.
_OTHER_INVALID_USAGE = ("nccl.no_interface", "nccl.no_net_plugin")


@rule("logs.device_assignment", "config.device_assignment")
def device_assignment(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks are mapped to GPUs wrongly: two on one device, or one on a device that is missing.

    What it detects:
    NCCL's `Duplicate GPU detected : rank X and rank Y both on CUDA device Z` and (2.27+)
    `Multiple Ranks are using the same GPU/Partition` (0.85); NCCL's argument check
    `AllReduce : sendbuff allocated on device 1 mismatchs with NCCL device 0` (0.7: a
    collective's tensor on another GPU than its communicator's); ProcessGroupNCCL's `GPU
    devices are not known` and `Failed to infer a GPU device id to perform barrier` (0.6:
    no set_device or device_id); NCCL_DEBUG=INFO
    `Init START/COMPLETE` lines of one communicator that place two processes on one busId of
    one host; `CUDA error: invalid device ordinal` (set_device(local_rank) with more ranks
    than GPUs, or RANK used instead of LOCAL_RANK on a second node; XPU and other backends
    word it `The device index is out of range. It must be in [0, 6), but got 11.`, torch
    1.x's torch.cuda and DataParallel `AssertionError: Invalid device id`);
    `all CUDA-capable devices are busy or unavailable` (two ranks on one GPU in
    exclusive-process mode; a TPU's `already in use by process` or `/dev/vfio/0: Device or
    resource busy`, a Gaudi's `[Device already acquired]`);
    torch.load's `Attempting to deserialize object on CUDA device 1 but
    torch.cuda.device_count() is 1` (0.8: no map_location); DistributedDataParallel's
    `device_ids and output_device arguments only work with ... module parameters
    {device(type='cpu')}` (0.8: the module was wrapped before it was moved to its GPU);
    torch's `No CUDA GPUs are available` and CUDA's `no CUDA-capable device is detected`
    (0.6: the rank sees no GPU: CUDA_VISIBLE_DEVICES empty or wrong, a container without GPUs);
    an index past the devices CUDA_VISIBLE_DEVICES lists (0.8: torchrun's `local_rank 1
    exceeds available GPUs in CUDA_VISIBLE_DEVICES=0`, torch.cuda's `device 3 is not visible
    (CUDA_VISIBLE_DEVICES=[0, 1])`); FSDP's `FSDP only supports single device modules but got
    params on {...}` (0.7: part of the module was moved to the GPU before wrapping);
    torchtune's `You can't specify a device index when using distributed training` (0.75);
    TRL's `Attempting to use the same CUDA device for multiple distinct roles/ranks within the
    same communicator` (0.8: trainer and vLLM server on one GPU);
    Lightning's `You requested to find 8 devices but this machine only has 4 GPUs` (0.75; 1.x's
    `You requested GPUs: [1]` / `But your machine only has: [0]`, and `CUDAAccelerator can not
    run on your system since the accelerator is not available` when torch sees no GPU),
    `The devices [0] are occupied by other processes` (0.7) and its DeepSpeed strategy's
    `The selected device indices [2, 3] don't match the local rank values` (0.75);
    weaker: NCCL's `invalid usage` result with no reason shown (its usual cause is two
    ranks on one GPU; NCCL_DEBUG=WARN prints the `Duplicate GPU` line); weaker still, one
    operation on tensors of two GPUs (`Expected all tensors to be on the same device, ...
    cuda:0 and cuda:1`): a rank's model, batch or checkpoint is not on its own device;
    DataParallel's `module must have its parameters and buffers on device cuda:N
    (device_ids[0]) but found one of them on device: cpu` (0.75: the model was wrapped
    before `.to(device)`); ProcessGroupNCCL's `Attempt to perform collective on tensor not on
    device passed to init_process_group` (0.75: no set_device before the tensors were made);
    Megatron's `expected local-rank to be the same as rank %
    device-count` (0.7: nodes with unequal GPU counts, or a launcher numbering local ranks
    another way); a model's device_map refused (0.8): accelerate's `You can't train a model that
    has been loaded in 8-bit precision on a different device than the one you're training
    on`, `... on multiple devices` and `... with device_map='auto' in any distributed mode`,
    transformers' `DeepSpeed Zero-3 is not compatible with ... passing a device_map`; the
    DeepSpeed runner's `No slot '4' specified on host 'localhost'` (0.75: --include, or the
    CUDA_VISIBLE_DEVICES it turns into one, names a GPU the host's slots do not have);
    weakest (0.3), ProcessGroupNCCL's `using GPU N ... as device(s) used by this process
    is/are currently unknown`: nothing bound the group's device, and it guessed one.

    Why it happens:
    The script never calls torch.cuda.set_device, hard-codes cuda:0, indexes devices with
    the global RANK, or runs more processes per node (--nproc-per-node) than the node has
    visible GPUs; CUDA_VISIBLE_DEVICES set to one GPU for every rank.

    Evidence:
    The NCCL warning naming the two ranks and the device, the init lines with their busId,
    the CUDA error and the user line (set_device, .cuda(), .to(device)) that raised it.

    Fix:
    One process per GPU, each calling torch.cuda.set_device(LOCAL_RANK) before
    init_process_group; --nproc-per-node equal to the number of visible GPUs.

    Known false positives:
    NCCL's `invalid usage` has other causes too (a communicator used after abort, too many
    outstanding operations); without the Duplicate GPU line it scores 0.5.
    `invalid device ordinal` from a checkpoint or a config naming a device that exists on
    another machine is still a device mapping error, but not a launcher one. Init lines of
    logs without commId (old NCCL) are grouped by communicator size, which can pair
    different communicators; that case scores lower.

    References:
    NCCL troubleshooting ("Duplicate GPU detected"); torchrun docs on LOCAL_RANK and
    set_device; CUDA error cudaErrorInvalidDevice / cudaErrorDevicesUnavailable.
    """
    found: list[tuple[float, str, list[Signal], list[int], str]] = []
    duplicate = signals(evidence, "setup.duplicate_gpu")
    if duplicate:
        ranks = sorted({r for _, s in duplicate for r in s.fields.get("ranks", [])})
        device = duplicate[0][1].fields.get("bus_id", "?")
        found.append(
            (
                0.93,
                f"{rank_subject(ranks, 'share')} one GPU (NCCL: Duplicate GPU, device {device})",
                duplicate,
                ranks,
                _FIX_SHARED,
            )
        )
    shared = _shared_bus(signals(evidence, "nccl.init"))
    if shared:
        confidence, items, ranks, bus = shared
        found.append(
            (
                confidence,
                f"{rank_label(ranks)} initialized NCCL on one GPU (busId {bus})",
                items,
                ranks,
                _FIX_SHARED,
            )
        )
    ordinal = signals(evidence, "setup.invalid_device_ordinal")
    if ordinal:
        ranks = ranks_of(s for _, s in ordinal)
        in_set_device = _raised_in(evidence, ranks, "set_device")
        counted = next((s.fields for _, s in ordinal if s.fields.get("devices")), None)
        what = (
            f"device {counted['index']}; it sees {counted['devices']}"
            if counted
            else "invalid device ordinal"
        )
        found.append(
            (
                0.88 if in_set_device else 0.78,
                f"a rank asked for a GPU index its host does not have ({what})"
                + (f" on {rank_label(ranks)}" if ranks else ""),
                ordinal,
                ranks,
                _FIX_ORDINAL,
            )
        )
    for name, confidence, what, fix in _WORDED:
        items = signals(evidence, name)
        if items:
            found.append((confidence, what, items, ranks_of(s for _, s in items), fix))
    off_device = signals(evidence, "setup.module_off_device")
    if off_device:
        first = off_device[0][1].fields
        found.append(
            (
                0.75,
                f"DataParallel got a module on {first['found']}, not on {first['expected']}",
                off_device,
                ranks_of(s for _, s in off_device),
                _FIX_MIXED,
            )
        )
    mixed = signals(evidence, "setup.two_gpus_in_one_op")
    if mixed:
        first = mixed[0][1].fields
        found.append(
            (
                0.4,
                f"one operation mixed {first['first']} and {first['second']}: part of a rank's"
                " model or data is not on its own GPU",
                mixed,
                ranks_of(s for _, s in mixed),
                _FIX_MIXED,
            )
        )
    invalid = [
        (e, s)
        for e, s in signals(evidence, "nccl.error")
        if s.fields.get("kind") == "invalid_usage"
    ]
    if invalid and not duplicate and not signals(evidence, *_OTHER_INVALID_USAGE):
        found.append(
            (
                0.5,
                "NCCL reports invalid usage, most often two ranks on one GPU",
                invalid,
                ranks_of(s for _, s in invalid),
                _FIX_SHARED,
            )
        )
    if not found:
        return
    ranks = max(found, key=lambda f: f[0])[3]  # these explanations carry their own culprits
    yield quoted_finding(
        evidence,
        [(confidence, what, items, fix) for confidence, what, items, _, fix in found],
        _DEVICE_TEXT,
        "each rank's LOCAL_RANK, CUDA_VISIBLE_DEVICES and torch.cuda.current_device() "
        "show two ranks on one GPU or an index past torch.cuda.device_count()",
        ranks=ranks,
    )


def _raised_in(evidence: EvidenceSet, ranks: list[int], function: str) -> bool:
    """A traceback on one of `ranks` (any rank when none are known) passes through `function`."""
    for _, t in comm_view(evidence).errors():
        if ranks and t.rank not in ranks:
            continue
        if "invalid device ordinal" in t.message and any(f.function == function for f in t.frames):
            return True
    return False


def _shared_bus(inits: list[Signal]) -> tuple[float, list[Signal], list[int], str] | None:
    """Two processes of one communicator on one GPU of one host, from NCCL's init lines."""
    groups: dict[tuple[str, str], dict[str, list[Signal]]] = {}
    for e, s in inits:
        bus, host = s.fields.get("bus_id"), s.host
        if bus is None or host is None or s.pid is None:
            continue
        comm_id = _COMM_ID.search(s.text)
        key = (host, comm_id.group(1) if comm_id else f"nranks={s.fields.get('nranks')}")
        groups.setdefault(key, {}).setdefault(str(bus), []).append((e, s))
    for key, by_bus in groups.items():
        for bus_id, items in by_bus.items():
            pids = {s.pid for _, s in items}
            comm_ranks = {s.fields.get("rank") for _, s in items}
            if len(pids) > 1 and len(comm_ranks) > 1:
                confidence = 0.82 if key[1].startswith("0x") else 0.6
                ranks = sorted(int(r) for r in comm_ranks if r is not None)
                return confidence, items, ranks, bus_id
    return None
