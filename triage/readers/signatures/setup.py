"""Launch and setup: the launcher, the script's arguments, the env, devices and world size.

These errors happen before or at the first collective and name their cause outright:
argparse rejecting the `--local-rank=N` that `torch.distributed.launch` appends, env://
rendezvous missing RANK or MASTER_ADDR, two ranks on one GPU, a DeviceMesh larger than
the world (a backend asked to serve a device or an op it cannot is in backends.py).
Messages are matched in the wordings of torch 1.x to 2.x and of NCCL 2.x; the numbers they
carry (ranks, sizes, device ids) become fields for the rules.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

# --- config.launcher_args ----------------------------------------------------------------

#: Flags a launcher adds to the script's argv (torch.distributed.launch, deepspeed, old
#: torchrun --no-python wrappers); a script that does not declare them fails argparse.
LAUNCHER_FLAG = re.compile(  # forums turn `--` into an en or em dash
    r"(?:--|\u2013|\u2014)(?:local[-_]rank|use[-_]env|nproc[-_]per[-_]node|nnodes|node[-_]rank|master[-_](?:addr|port)"
    r"|rdzv[-_]\w+|standalone|max[-_]restarts)\b"
)


def _arguments(found: re.Match[str]) -> dict[str, Any]:
    names = found["args"].strip()
    launcher = sorted({m.group(0) for m in LAUNCHER_FLAG.finditer(names)})
    return {"launcher_flags": launcher} if launcher else {}


signature(
    "setup.unrecognized_arguments",
    r"(?:(?P<prog>\S+): )?[Ee]rror: unrecognized arguments: (?P<args>.+)",
    anchors="rror: unrecognized arguments:",
    summary="argparse rejected arguments the launcher or the command line passed to the script",
    extract=_arguments,
)

# argparse prints the usage before its error (and only then, or for --help): a usage
# block in a job's log is a command line the script rejected, even when the error line
# after it was not kept.
signature(
    "setup.usage_printed",
    r"^\s*usage: (?P<prog>\S+) ",
    anchors="usage: ",
    summary="a script printed its argparse usage: its command line was rejected",
)

signature(
    "setup.usage_local_rank",
    r"\[(?P<flag>--local[-_]rank)\b[^\]]*\]",
    anchors=("[--local-rank", "[--local_rank"),
    summary="a script's usage lists the local-rank option the launcher passes",
)

signature(
    "setup.required_arguments",
    r"(?P<prog>\S+): error: the following arguments are required: (?P<args>.+)",
    anchors="error: the following arguments are required:",
    summary="argparse misses arguments the script requires (e.g. --local_rank, which torchrun no longer passes)",
    extract=_arguments,
)

signature(
    "setup.hf_unused_arguments",
    r"Some specified arguments are not used by the HfArgumentParser: (?P<args>.+)",
    anchors="not used by the HfArgumentParser",
    summary="transformers' HfArgumentParser rejected arguments the launcher passed",
    extract=_arguments,
)

signature(
    "setup.launch_deprecated",
    r"The module torch\.distributed\.launch is deprecated",
    anchors="The module torch.distributed.launch is deprecated",
    summary="the job uses torch.distributed.launch, which passes --local-rank=N to the script",
)

# --- config.env_missing ------------------------------------------------------------------

#: Variables a launcher sets; a script reading one that is absent fails with KeyError.
LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
_VARIABLE_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_", "PMI_", "TORCHELASTIC_")

signature(
    "setup.rendezvous_env_missing",
    r"Error initializing torch\.distributed using (?P<method>env|tcp|file)://\s*rendezvous:\s*"
    r"(?:environment variable (?P<variable>\w+) expected, but not set"
    r"|(?P<parameter>rank parameter|world size parameter|port number|path) missing)",
    anchors="Error initializing torch.distributed using",
    summary="init_process_group's rendezvous lacks a variable or parameter the launcher should set",
)

signature(
    "setup.env_key_error",
    r"KeyError: '(?P<variable>"
    + "|".join(LAUNCHER_VARIABLES)
    + "|"
    + "|".join(f"{p}\\w+" for p in _VARIABLE_PREFIXES)
    + r")'",
    anchors=tuple(f"KeyError: '{name}" for name in LAUNCHER_VARIABLES + _VARIABLE_PREFIXES),
    summary="the script reads a launcher variable that is not set (run without torchrun/srun?)",
)

# A library naming the launcher variable it could not find (torch's get_node_local_rank:
# `LOCAL_RANK is not in the environment`; `environment variable MASTER_PORT is not set`;
# accelerate's `` `MASTER_ADDR` env was not set``).
signature(
    "setup.env_named_missing",
    r"\b(?:environment variable )?[`'\"]?(?P<variable>"
    + "|".join(LAUNCHER_VARIABLES)
    + r")\b[`'\"]?(?: env(?:ironment variable)?)? (?:is not|isn't|was not|not) (?:set|defined|"
    r"found|in the environment)"
    # DeepSpeed: `DeepSpeed requires the LOCAL_RANK environment variable, it is set by the
    # deepspeed launcher`
    r"|requires the (?P<required>" + "|".join(LAUNCHER_VARIABLES) + r") environment variable",
    # accelerate: "but `MASTER_ADDR` env was not set"
    anchors=tuple(f"{name}{end}" for name in LAUNCHER_VARIABLES for end in (" ", "`", "'", '"')),
    summary="a library names a launcher variable that is not in the process's environment",
    extract=lambda found: {"variable": found["variable"] or found["required"]},
)

signature(
    "setup.env_read",
    # not torch.distributed.launch's advice to "read from `os.environ['LOCAL_RANK']` instead"
    r"(?<!read from `)(?:os\.environ\[|_env_error\()[\"'](?P<variable>"
    + "|".join(LAUNCHER_VARIABLES)
    + "|"
    + "|".join(f"{p}\\w+" for p in _VARIABLE_PREFIXES)
    + r")[\"'][\])]",
    anchors=("os.environ[", "_env_error("),
    summary="a line reads a launcher variable with os.environ[...] (a KeyError when unset), or"
    ' torch\'s env:// rendezvous raises for one (`raise _env_error("MASTER_ADDR")`)',
)

signature(
    "setup.empty_master_addr",
    # a launch command or environment printout whose rendezvous address is empty (a
    # launcher that derived it from a command that printed nothing: `hostname -I` in a pod),
    # and DeepSpeed's runner saying so
    r"--master[_-]addr=(?=\s|$)|(?<![\w$])MASTER_ADDR=(?=\s|;|$)|Using IP address of  for node",
    anchors=("-addr=", "_addr=", "MASTER_ADDR=", "Using IP address of  for"),
    summary="the rendezvous address (MASTER_ADDR, --master_addr) is empty in the launch",
)

signature(
    "setup.default_group_missing",
    r"Default process group (?:has not been|is not) initialized",
    anchors=(
        "Default process group has not been initialized",
        "Default process group is not initialized",
    ),
    summary="a collective ran before init_process_group, typically because the script was not launched distributed",
)

# torch's lazy CUDA init in a process forked after its parent had initialised CUDA (a
# notebook launcher, a fork start method, a DataLoader worker touching the GPU).
signature(
    "setup.cuda_after_fork",
    r"Cannot re-initialize CUDA in forked subprocess"
    r"|Lightning can't create new processes if CUDA is already initialized",
    anchors=(
        "Cannot re-initialize CUDA in forked subprocess",
        "Lightning can't create new processes if CUDA is already initialized",
    ),
    summary="a process forked after its parent initialised CUDA tried to use CUDA",
)

signature(
    "setup.deepspeed_no_launcher",
    r"Not using the DeepSpeed or dist launchers, attempting to detect MPI environment",
    anchors="Not using the DeepSpeed or dist launchers",
    summary="DeepSpeed found no launcher variables (RANK, LOCAL_RANK, ...) and falls back to MPI",
)

# --- config.device_assignment ------------------------------------------------------------

signature(
    "setup.duplicate_gpu",
    r"Duplicate GPU detected\s*:\s*rank (?P<rank>\d+) and rank (?P<other_rank>\d+) both on CUDA device "
    r"(?P<bus_id>[0-9a-fA-F]+)",
    anchors="Duplicate GPU detected",
    summary="NCCL found two ranks of one communicator on the same GPU",
    extract=lambda found: {"ranks": sorted({int(found["rank"]), int(found["other_rank"])})},
)

# CUDA's wording, and c10's check_device_index for the other device backends (XPU, and the
# out-of-tree ones built on PrivateUse1): `The device index is out of range. It must be in
# [0, 6), but got 11.`
signature(
    "setup.invalid_device_ordinal",
    r"invalid device ordinal"
    r"|The device index is out of range\. It must be in \[0, (?P<devices>\d+)\), but got"
    r" (?P<index>-?\d+)"
    # torch.cuda's and DataParallel's check of a device index (torch 1.x)
    r"|AssertionError: Invalid device id\b"
    # init_process_group's device_id (torch >= 2.8)
    r"|device_id (?P<device_id>\d+) is out of range\. Please use a device index less than the"
    r" number of accelerators available",
    anchors=(
        "invalid device ordinal",
        "The device index is out of range. It must be in",
        "is out of range. Please use a device index less than",
        "AssertionError: Invalid device id",
    ),
    summary="a rank asked for a GPU index this host (or its CUDA_VISIBLE_DEVICES) does not have",
)

# An index past the devices CUDA_VISIBLE_DEVICES lists: torchrun's virtual local ranks
# (`local_rank 1 exceeds available GPUs in CUDA_VISIBLE_DEVICES=0`) and torch.cuda's NVML
# queries (`device 3 is not visible (CUDA_VISIBLE_DEVICES=[0, 1])`).
signature(
    "setup.device_not_visible",
    r"local_rank (?P<index>\d+) exceeds available GPUs in CUDA_VISIBLE_DEVICES=(?P<visible>\S*)"
    r"|device (?P<device>\d+) is not visible \((?:CUDA|HIP)_VISIBLE_DEVICES=(?P<listed>[^)]*)\)",
    anchors=("exceeds available GPUs in", "is not visible ("),
    summary="a rank's device index is past the GPUs its CUDA_VISIBLE_DEVICES lists",
)

# torch's lazy CUDA init when the process sees no device, and CUDA's cudaErrorNoDevice.
signature(
    "setup.no_gpu_visible",
    r"No (?:CUDA|HIP) GPUs are available|no CUDA-capable device is detected",
    anchors=(
        "No CUDA GPUs are available",
        "No HIP GPUs are available",
        "no CUDA-capable device is detected",
    ),
    summary="the process sees no GPU (CUDA_VISIBLE_DEVICES empty or wrong, a container without GPUs)",
)

signature(
    "setup.devices_unavailable",
    r"all CUDA-capable devices are busy or unavailable|CUDA-capable device\(s\) is/are busy or unavailable"
    # the other accelerators held by another process: a TPU (`The TPU is already in use by
    # process with pid 24811`, `open(/dev/vfio/0): Device or resource busy`), a Gaudi
    # (`synStatus=20 [Device already acquired]`)
    r"|The TPU is already in use by process|open\(/dev/vfio/\d+\): Device or resource busy"
    r"|\[Device already acquired\]",
    anchors=(
        "devices are busy or unavailable",
        "is/are busy or unavailable",
        "The TPU is already in use by process",
        "): Device or resource busy",
        "[Device already acquired]",
    ),
    summary="the GPU refused another context: exclusive-process mode with two ranks (or another job) on it",
)

signature(
    "setup.two_gpus_in_one_op",
    r"Expected all tensors to be on the same device, but found at least two devices, "
    r"(?P<first>cuda:\d+) and (?P<second>cuda:\d+)",
    anchors="Expected all tensors to be on the same device",
    summary="one process used two GPUs in one operation: a rank's tensors are not on its device",
)

# DataParallel's check: the module is not on the first device of device_ids (the model was
# wrapped before `.to(device)`, or part of it stayed on the CPU).
signature(
    "setup.module_off_device",
    r"module must have its parameters and buffers on device (?P<expected>\S+) "
    r"\(device_ids\[0\]\) but found one of them on device: (?P<found>\S+)",
    anchors="module must have its parameters and buffers on device",
    summary="DataParallel was given a module that is not on device_ids[0]",
)

# A model's device_map that one process per GPU cannot take: accelerate refuses a quantized
# (bitsandbytes) model loaded on another GPU than the process's own (`device_map="auto"` in
# every rank spreads or stacks it), transformers refuses any device_map under ZeRO-3 (which
# partitions the model itself)
signature(
    "setup.device_map_refused",
    r"You can't train a model that has been loaded (?:(?:in [\w -]+ precision )?on (?:a different"
    r" device than the one you're training on|multiple devices)|with `device_map='auto'` in any"
    r" distributed mode)"
    r"|DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a"
    r" `device_map`",
    anchors=("You can't train a model that has been loaded", "DeepSpeed Zero-3 is not compatible"),
    summary="a model's device_map conflicts with one process per GPU (quantized on another GPU, ZeRO-3)",
)

# ProcessGroupNCCL's warning when a collective runs before the group knows its device (no
# device_id in init_process_group, a barrier before set_device): it guesses GPU = rank %
# GPUs, which hangs or crashes when that is not the rank's GPU.
signature(
    "setup.device_guessed",
    # torch 2.0-2.3 said `Rank 1 using best-guess GPU 1 to perform barrier as devices used by
    # this process are currently unknown`
    r"using (?:best-guess )?GPU (?P<device>\d+) (?:to perform barrier )?as devices? used by"
    r" this process (?:is|are) currently unknown",
    anchors=(
        "used by this process is currently unknown",
        "used by this process are currently unknown",
    ),
    summary="the process group guessed a rank's GPU from its rank (no device was bound to it)",
)

# ProcessGroupNCCL without a device to build its communicator on or to run barrier() on:
# no torch.cuda.set_device and no device_id= before the first collective.
signature(
    "setup.group_device_unknown",
    r"Not able to create/get the NCCL Communicator since the GPU devices are not known"
    r"|Failed to infer a GPU device id to perform barrier",
    anchors=(
        "since the GPU devices are not known",
        "Failed to infer a GPU device id to perform barrier",
    ),
    summary="ProcessGroupNCCL does not know which GPU this rank uses (no set_device/device_id)",
)

# ProcessGroupNCCL refusing a collective on a tensor that is not on the device the group
# was bound to (`device_id=` in init_process_group, or the current device when it was made).
signature(
    "setup.tensor_off_bound_device",
    r"Attempt to perform collective on tensor not on device passed to init_process_group",
    anchors="not on device passed to init_process_group",
    summary="a collective's tensor is not on the GPU its process group was bound to",
)

# --- config.world_size_mismatch ----------------------------------------------------------

signature(
    "setup.mesh_too_big",
    r"Mesh should not be bigger than default world size(?: (?P<world_size>\d+))?, but found "
    r"(?P<mesh_size>\d+) ranks",
    anchors="Mesh should not be bigger than default world size",
    summary="a DeviceMesh has more ranks than the job's world size",
)

signature(
    "setup.mesh_heterogeneous",
    r"DeviceMesh only support homogeneous hardware, but found (?P<world_size>\d+) ranks and "
    r"(?P<devices>\d+) (?P<device_type>\w+) devices",
    anchors="DeviceMesh only support homogeneous hardware",
    summary="the world size is not a multiple of the devices per host",
)

signature(
    "setup.mesh_group_mismatch",
    r"Invalid mesh (?P<mesh>.+?) for ProcessGroup with ranks (?P<group_ranks>\[.*?\])"
    r"|Each device mesh dimension should get only one process group",
    anchors=("for ProcessGroup with ranks", "Each device mesh dimension should get only one"),
    summary="a DeviceMesh does not match the ranks of the process group it is built from",
)

signature(
    "setup.rank_out_of_range",
    r"Invalid rank (?P<bad_rank>\d+), rank should be in the interval \[0, (?P<max_rank>\d+)\]"
    r"|Rank (?P<group_rank>\d+) is out of range\. Valid ranks are 0 to (?P<max_valid>\d+)"
    r"(?: \(world_size=(?P<world_size>\d+)\))?"
    r"|the new group's rank should be within the world_size"
    r"|the new group's world size should be less or equal to the world size"
    r"|the split group's size should be (?:less or equal to|no larger than) the world_size"
    r"|The arg 'group_size' \((?P<group_size>\d+)\) must not exceed the world size",
    anchors=(
        "rank should be in the interval",
        "is out of range. Valid ranks are",
        "the new group's rank should be within",
        "the new group's world size should be less",
        "the split group's size should be",
        "must not exceed the world size",
    ),
    summary="a rank number exceeds the world size (sampler num_replicas, new_group ranks)",
)

# c10d's checks of a collective's buffers against the group's size (ProcessGroupNCCL's and
# the XPU/oneCCL backends' wording, gloo's own, and the all_to_all split sizes): an output
# sized for another world (the global world size used for a subgroup, a hard-coded count).
signature(
    "setup.collective_buffer_size",
    r"output tensor size must be equal to world_size times input tensor size"
    r"|input tensor must be the same size as output size times world size"
    r"|ProcessGroupGloo::(?P<op>\w+): invalid (?:output tensor list|tensor size) at index \d+"
    r" \(expected (?P<expected>[^,]+), got (?P<got>[^)]+\)?)\)"
    r"|Check failed: outputShape\[0\] \* worldSize == inputShape\[0\]"
    r"|Split sizes doesn't match total dim 0 size"
    r"|Tensor's dim 0 does not divide equally across group size"
    r"|Number of tensor splits not equal to group size"
    r"|invalid input tensor list size, must be world size"
    r"|(?:Output|Input) list size should be \d+, same as size of the process group"
    r"|tensor list size \d+ does not match world size \d+"
    r"|output lists should be equal to world size"
    r"|Tensor list input to scatter/gather must match number of collective participants",
    anchors=(
        "must be equal to world_size times input tensor size",
        "must match number of collective participants",
        "must be the same size as output size times world size",
        ": invalid output tensor list at index",
        ": invalid tensor size at index",
        "outputShape[0] * worldSize == inputShape[0]",
        "Split sizes doesn't match total dim 0 size",
        "does not divide equally across group size",
        "Number of tensor splits not equal to group size",
        "invalid input tensor list size, must be world size",
        "same as size of the process group",
        "does not match world size",
        "output lists should be equal to world size",
    ),
    summary="a collective's output or input buffer is not sized for the group's world size",
)

# torch.distributed.pipelining (and PiPPy before it): a pipeline stage per rank of the
# pipe group, and the model was cut into fewer (no split_spec / pipe_split points).
# A pipeline schedule given fewer micro-batches than its stages need: Megatron's `The number
# of contiguous micro-batches in a virtual pipeline stage should range in [PP=2 , M=1]`,
# nanotron's `Number of microbatches (1) must be at least PP_SIZE-1=7`.
signature(
    "setup.microbatches_for_pipeline",
    r"(?i)\b(?:number of (?:contiguous )?micro-?batch\w*|n(?:b|um)_micro_?batch\w*)"
    r"[^\n]{0,80}?(?:must|should)\b[^\n]{0,40}?\b(?:PP(?:_SIZE)?\b|pipeline)",
    anchors=("micro-batches", "microbatches", "micro_batches", "Micro-batches", "Microbatches"),
    summary="the pipeline schedule has fewer micro-batches than its stages need",
)

signature(
    "setup.pipeline_stages_fewer",
    r"Pipeline group size (?P<group_size>\d+) cannot be larger than number of stages"
    r" (?P<stages>\d+)",
    anchors="cannot be larger than number of stages",
    summary="the pipeline group has more ranks than the model was split into stages",
)

signature(
    "setup.world_not_divisible",
    r"(?i)\bworld[ _]?size\b[^\n]{0,60}?\b(?:is not|isn't|must be|should be|not)\s+(?:evenly\s+)?"
    r"(?:divisible by|equal to)\s*(?P<by>[^\n]{0,120})"
    # DeepSpeed's pipeline and expert layouts, and its elastic GPU counts: `num_stages (3) must
    # divide distributed world size (8)`, `Invalid ep_size=16 for world_size=8`, `World size
    # (12) is not valid with the current list of valid GPU counts`
    r"|\b(?P<part>\w+) \(\d+\) must divide distributed world size"
    r"|Invalid (?P<size>\w+_size)=\d+ for world_size=\d+"
    r"|World size \(\d+\) is not valid with the current list of valid GPU counts",
    anchors=(
        "divisible by",
        "is not equal to",
        "must divide distributed world size",
        "for world_size=",
        "is not valid with the current list of valid GPU counts",
    ),
    summary="the world size does not factor into the requested parallel dimensions",
)

signature(
    "setup.launcher_ignores_visible_devices",
    r"Detected CUDA_VISIBLE_DEVICES=(?P<visible>\S*) but ignoring it because one or several of"
    r"\s+--include/--exclude/--num_gpus/--num_nodes",
    anchors="but ignoring it because one or several of",
    summary="the DeepSpeed runner ignores CUDA_VISIBLE_DEVICES because a device option was given",
)

signature(
    "setup.parallel_size_splits_model",
    r"(?i)\b(?:total\s+)?(?:the\s+)?(?P<what>(?:number\s+of\s+|num_?)?"
    r"(?:attention[ _]heads|(?:key[ _]value|kv|query)[ _]heads|heads|hidden[ _]layers|layers"
    r"|experts|hidden[ _]size|intermediate[ _]size|vocab(?:ulary)?[ _]size)\b"
    r"(?:\s*\(?\d+\)?)?)[^\n]{0,20}?\s(?:must|should)\s+be\s+(?:evenly\s+)?"
    r"(?:divisible\s+by|a\s+multiple\s+of)\s+"
    r"(?P<by>(?:the\s+)?(?:(?:tensor|pipeline|expert|context|sequence|model)[ _]"
    r"(?:model[ _])?parallel(?:[ _](?:size|degree|world[ _]size))?|[tpec]p[ _]?size|mp[ _]?size)"
    r"\b[^\n]{0,40})",
    anchors=("divisible by", "multiple of"),
    summary="the parallel size does not divide a model dimension (attention heads, layers)",
)

signature(
    "setup.batch_for_another_world",
    r"train_batch_size is not equal\s*to micro_batch_per_gpu \* gradient_acc_step \* world_size\s*"
    r"(?P<train>\d+) != (?P<micro>\d+) \* (?P<gas>\d+) \* (?P<world>\d+)"
    r"|ds train_batch_size=(?P<ds>\d+) vs hf train_batch_size \(calculated\)=(?P<hf>\d+)",
    anchors=("train_batch_size is not equal", "vs hf train_batch_size"),
    summary="DeepSpeed's global batch size does not factor into this launch's world size",
)

signature(
    "setup.state_dict_shard",
    r"size mismatch for (?P<param>\S+?): copying a param with shape torch\.Size\(\[(?P<saved>[\d, ]*)\]\)"
    r" from checkpoint, the shape in current model is torch\.Size\(\[(?P<now>[\d, ]*)\]\)",
    anchors="from checkpoint, the shape in current model is",
    summary="a checkpoint's tensor has another shape than the model's (load_state_dict)",
)

# Two layers of a launch counting the world differently say so in one line: DeepSpeed's
# `MPI world size 16 does not match torch world size 8`.
signature(
    "setup.world_sizes_differ",
    r"(?i)(?P<one>\w+ )?world[ _]size (?P<a>\d+) (?:does not|doesn't) match (?:the )?"
    r"(?P<other>\w+ )?world[ _]size (?P<b>\d+)",
    anchors=("does not match", "doesn't match"),
    summary="two layers of the launch count a different world size",
)

# A list indexed by the local rank (`self.parallel_devices[self.local_rank]`, `gpus[args.
# local_rank]`): with an IndexError it is shorter than the processes started on the node.
signature(
    "setup.local_rank_index",
    r"\w[\w.\])]*\[(?:[\w.]+\.)?local_rank\]",
    anchors="local_rank]",
    summary="a line indexes a list with the local rank",
)

signature(
    "setup.parallel_dims",
    # torchtitan's `... != WORLD_SIZE(8)` and `dp_shard * dp_replicate * cp * tp * pp (16) !=
    # world_size (8)`, nanotron's `TP*CP*DP*PP=1*1*2*2=4 != WORLD_SIZE=8`; DeviceMesh's own
    # `Expects the number of devices in the mesh (16) to equal the world size (8)` and
    # `WORLD_SIZE(8) != mesh size(4)`
    r"(?i)!= ?world[ _]?size ?[(=]? ?(?P<world_size>\d+)"
    r"|number of devices in the mesh \((?P<mesh>\d+)\) to equal the world size \((?P<world>\d+)\)"
    r"|WORLD_SIZE ?\((?P<world_of_mesh>\d+)\) != mesh size ?\((?P<mesh_size>\d+)\)"
    # TensorRT-LLM's engine built for another world (`Engine world size (2 * 1) != Runtime
    # world size (1)`, `Assertion failed: mpiSize == tp * pp`), vLLM's GPUs per node against
    # its tensor-parallel size
    r"|!= Runtime world size \((?P<runtime>\d+)\)|Assertion failed: mpiSize == tp \* pp"
    r"|number of GPUs per node is not divisible by the number of tensor parallelism",
    anchors=(
        "!= Runtime world size",
        "Assertion failed: mpiSize == tp * pp",
        "not divisible by the number of tensor parallelism",
        "!= WORLD_SIZE",
        "!= world_size",
        "!= world size",
        "!=world_size",
        "!=WORLD_SIZE",
        "to equal the world size",
        "!= mesh size",
    ),
    summary="the product of the parallel dimensions (dp, tp, pp, cp) differs from WORLD_SIZE",
)


signature(
    "setup.nccl_rank_count",
    r"Bootstrap Root : mismatch in rank count from procs (?P<nranks>\d+) : (?P<other>\d+)"
    r"|Invalid rank requested : (?P<bad_rank>\d+)/(?P<world_size>\d+)"
    r"|Bootstrap Root : rank (?P<dup_rank>\d+) of (?P<of>\d+) ranks has already checked in"
    r"|Bootstrap Root : mismatch in info from procs, nranks (?P<info_a>\d+) vs (?P<info_b>\d+)",
    anchors=(
        "mismatch in rank count",
        "Invalid rank requested",
        "has already checked in",
        "mismatch in info from procs",
    ),
    summary="NCCL's bootstrap saw ranks disagree on the world size, or one rank number twice",
)

# Megatron-LM (and Megatron-DeepSpeed) derive the device as rank % device count and check it
# against the launcher's LOCAL_RANK: unequal GPU counts per node, or a launcher that numbers
# local ranks another way, break the assumption.
signature(
    "setup.local_rank_device_count",
    r"expected local-rank to be the same as rank % device-count",
    anchors="expected local-rank to be the same as rank % device-count",
    summary="Megatron: LOCAL_RANK differs from rank % torch.cuda.device_count()",
)
