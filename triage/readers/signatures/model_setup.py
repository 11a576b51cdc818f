"""How a script placed and wrapped its model: DistributedDataParallel's device_ids and
frozen modules, SyncBatchNorm's device, a checkpoint's devices. Each names a mistake of the
training script's set-up, in the words of the torch API that refused it."""

from __future__ import annotations

from triage.readers.signatures import signature

# torch.load's check of a storage's device against this host's GPUs.
signature(
    "setup.checkpoint_on_missing_gpu",
    r"Attempting to deserialize object on CUDA device (?P<device>\d+) but"
    r" torch\.cuda\.device_count\(\) is (?P<count>\d+)",
    anchors="Attempting to deserialize object on CUDA device",
    summary="a checkpoint's tensors name a GPU index this host does not have",
)

# DistributedDataParallel's check of device_ids against where the module's parameters are.
signature(
    "setup.ddp_module_device",
    r"DistributedDataParallel device_ids and output_device arguments only work with"
    # torch 1.5 said `single-device CUDA modules`
    r" single-device(?:/multiple-device GPU modules or CPU| CUDA) modules, but got device_ids"
    # torch 1.6 stopped after the ids (`... but got device_ids 1`); a paste may wrap the
    # parameters' set over lines
    r" (?P<device_ids>\[[^\]]*\]|\d+)(?:, output_device (?P<output_device>\S+), and module"
    r" parameters (?P<params>\{[^}]*\}?))?",
    anchors="device_ids and output_device arguments only work with",
    summary="DistributedDataParallel was given device_ids for a module that is not on that GPU",
)

# DistributedDataParallel refusing a module with nothing to train (a frozen reference model).
signature(
    "setup.ddp_nothing_to_train",
    r"DistributedDataParallel is not needed when a module doesn't have any parameter that"
    r" requires a gradient",
    anchors="DistributedDataParallel is not needed when a module",
    summary="DistributedDataParallel was asked to wrap a module whose parameters are all frozen",
)

# SyncBatchNorm's forward in training: it reduces statistics with a GPU collective.
signature(
    "setup.syncbn_off_gpu",
    r"SyncBatchNorm expected input tensor to be on GPU",
    anchors="SyncBatchNorm expected input tensor to be on GPU",
    summary="SyncBatchNorm got a CPU batch: it synchronises statistics on GPUs only",
)

# FSDP's check that one module's parameters share a device (part of it moved to the GPU).
signature(
    "setup.fsdp_module_devices",
    r"FSDP only supports single device modules but got params on (?P<devices>\{[^}]*\})"
    r"|FSDP does not support modules with different device types but got params on"
    r" (?P<first>\S+) and (?P<second>\S+)",
    anchors=("FSDP only supports single device modules", "modules with different device types"),
    summary="FSDP was given a module whose parameters sit on more than one device",
)

# torchtune's check of a configured device against the local rank under a launcher.
signature(
    "setup.device_index_vs_local_rank",
    r"You can't specify a device index when using distributed training\. Device specified is"
    r" (?P<device>\S+) but local rank is:? ?(?P<local_rank>\d+)",
    anchors="You can't specify a device index when using distributed training",
    summary="a configured device index differs from the process's local rank",
)

# TRL's vLLM weight-sync communicator: the trainer and the vLLM server share a GPU.
signature(
    "setup.device_shared_by_roles",
    r"Attempting to use the same CUDA device (?:\(UUID: [^)]*\) )?for multiple distinct"
    r" roles/ranks within the same communicator",
    anchors="for multiple distinct roles/ranks within the same communicator",
    summary="two ranks of one communicator (a trainer and a vLLM server) share one GPU",
)
