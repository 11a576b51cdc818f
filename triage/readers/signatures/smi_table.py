"""nvidia-smi's table, as reports paste it: which GPUs the host has, and which processes
hold memory on which GPU. Several processes of one job on one GPU, the others idle, is
the picture of ranks that never chose their own device.
"""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "smi.gpu_row",
    r"^\|\s+(?P<gpu>\d+)\s+\S.*?\|\s+0{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s",
    anchors="0000:",
    summary="nvidia-smi's row of one GPU (its index and bus id)",
    extract=lambda found: {"gpu": int(found["gpu"])},
)

signature(
    "smi.process_row",
    r"^\|\s+(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+(?:C\+G|C|G)\s+"
    r"(?P<name>\S(?:.*?\S)?)\s+(?P<mib>\d+)MiB\s*\|",
    anchors="MiB |",
    summary="nvidia-smi's row of a process holding memory on a GPU",
    extract=lambda found: {
        "gpu": int(found["gpu"]),
        "pid": int(found["pid"]),
        "name": found["name"].rsplit("/", 1)[-1],
        "mib": int(found["mib"]),
    },
)
