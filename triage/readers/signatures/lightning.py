"""Lightning's (and Fabric's) checks of its own launch settings against what the cluster or
the host gives it: devices x num_nodes against the world, its settings against Slurm's,
GPUs asked for against GPUs there, a second launch inside a launched process. Each names
the two numbers that disagree (checked against lightning/fabric's plugins/environments,
accelerators/cuda.py, strategies and launchers)."""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "lightning.world_differs",
    r"You set `devices=(?P<devices>\d+)` and `num_nodes=(?P<nodes>\d+)` in Lightning, but the"
    r" product \(\d+ \* \d+\) does not match the world size \((?P<world>\d+)\)"
    r"|You set `devices=(?P<slurm_devices>\d+)` in Lightning, but the number of tasks per node"
    r" configured in SLURM\s+`--ntasks-per-node=(?P<tasks>\d+)` does not match"
    r"|You set `num_nodes=(?P<slurm_nodes_set>\d+)` in Lightning, but the number of nodes"
    r" configured in SLURM\s+`--nodes=(?P<slurm_nodes>\d+)` does not match"
    r"|`data_parallel_size=(?P<dp>\d+)` and\s+`tensor_parallel_size=(?P<tp>\d+)` multiplied"
    r" should equal the world size\s+\((?P<mp_world>\d+)\)",
    anchors=(
        "does not match the world size",
        "number of tasks per node configured in SLURM",
        "number of nodes configured in SLURM",
        "multiplied should equal the world size",
    ),
    summary="Lightning's devices, num_nodes or parallel sizes disagree with the world it was given",
)

signature(
    "lightning.slurm_ntasks",
    r"You set `--ntasks=(?P<ntasks>\d+)` in your SLURM bash script, but this variable is not"
    r" supported",
    anchors="in your SLURM bash script, but this variable is not supported",
    summary="Lightning reads Slurm's tasks per node: --ntasks alone does not tell it",
)

signature(
    "lightning.gpus_missing",
    r"You requested to find (?P<wanted>\d+) devices but (?:this machine only has (?P<has>\d+)"
    r" GPUs|there are no visible CUDA devices on this machine)"
    r"|GPUs requested but none are available"
    # Lightning 1.x: `You requested GPUs: [1]` and, on the next line, `But your machine only
    # has: [0]`; and its accelerator check when torch sees no CUDA at all
    r"|You requested (?:GPUs|gpus?): (?P<requested>\[[^\]]*\])"
    r"|(?:CUDA|GPU)Accelerator can not run on your system since the accelerator is not available",
    anchors=(
        "You requested to find",
        "GPUs requested but none are available",
        "You requested GPUs: [",
        "You requested gpus: [",
        "You requested gpu: [",
        "Accelerator can not run on your system since the accelerator is not available",
    ),
    summary="Lightning was asked for more GPUs than the process sees",
)

signature(
    "lightning.gpus_occupied",
    r"The devices (?P<devices>\[[^\]]*\]) are occupied by other processes and can't be used",
    anchors="are occupied by other processes",
    summary="GPUs Lightning picked are held by other processes (exclusive compute mode)",
)

signature(
    "lightning.device_indices",
    r"The selected device indices (?P<indices>\[[^\]]*\]) don't match the local rank values of"
    r" processes",
    anchors="don't match the local rank values of processes",
    summary="Lightning's DeepSpeed strategy was given device indices other than the local ranks",
)

signature(
    "lightning.relaunch",
    r"Lightning attempted to launch new distributed processes with `local_rank > 0`",
    anchors="attempted to launch new distributed processes with",
    summary="Lightning tried to start processes from a process that already has a local rank",
)
