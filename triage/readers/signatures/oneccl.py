"""Intel oneCCL (the `ccl`/`xccl` backend on Intel GPUs and CPUs): its own error lines and the
two set-up failures its source spells out.

oneCCL logs `|CCL_ERROR| file.cpp:NNN function: message` and `|CCL_WARN| ...`. Each process
learns its local rank and count from its launcher's variables (MPI_LOCALRANKID /
MPI_LOCALNRANKS under Intel MPI's hydra, LOCAL_RANK / LOCAL_WORLD_SIZE with
CCL_PROCESS_LAUNCHER=torchrun, CCL_LOCAL_RANK / CCL_LOCAL_SIZE with none) and warns when it
finds none; its OFI transport (libfabric) fails when no provider fits (`fi_getinfo error`,
`can't find suitable provider`, `can not open network providers`).
"""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "ccl.error",
    r"\|CCL_ERROR\|\s*(?:(?P<where>[\w.]+:\d+)\s+)?(?P<message>.*)",
    anchors="|CCL_ERROR|",
    summary="oneCCL reported an error",
)

signature(
    "ccl.local_coord_missing",
    r"could not get local_idx/count from environment variables",
    anchors="could not get local_idx/count",
    summary="oneCCL found no launcher variable naming this process's local rank and count",
)

signature(
    "ccl.no_provider",
    r"can't find suitable provider|can not open network providers|"
    r"fi_getinfo error(?:: ret (?P<ret>-?\d+))?",
    anchors=("can't find suitable provider", "can not open network providers", "fi_getinfo error"),
    summary="oneCCL's OFI transport found no usable libfabric provider",
)
