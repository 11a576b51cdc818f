"""nvidia-smi's table, as reports paste it: which GPUs the host has, and which processes
hold memory on which GPU. Several processes of one job on one GPU, the others idle, is
the picture of ranks that never chose their own device.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

signature(
    "smi.gpu_row",
    r"^\|\s+(?P<gpu>\d+)\s+\S.*?\|\s+0{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s",
    anchors="0000:",
    summary="nvidia-smi's row of one GPU (its index and bus id)",
    extract=lambda found: {"gpu": int(found["gpu"])},
)


def _memory(found: re.Match[str]) -> dict[str, Any]:
    fields = {"used": int(found["used"]), "total": int(found["total"])}
    return fields | ({"util": int(found["util"])} if found["util"] else {})


# The line under a GPU row: fan, temperature, power, then the GPU's memory in use and its
# size, and its utilisation (`| 36%   30C    P8    15W / 250W |   6520MiB / 10989MiB |
# 100%      Default |`).
signature(
    "smi.gpu_memory",
    r"^\|?\s*(?:\d+%|N/A)\s+\d+C\s+\S+.*?\|\s+(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*\|"
    r"(?:\s+(?P<util>\d{1,3})%)?",
    anchors="MiB /",
    summary="nvidia-smi's memory in use on the GPU of the row above (and its utilisation)",
    extract=_memory,
)

signature(
    "smi.process_row",
    # the row's leading `|` may be lost where a paste cut the table's left edge
    r"^(?:\|\s+|\s*)(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+"
    r"(?:C\+G|C|G)\s+"
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

# `ps aux`'s row of a stopped (T) or zombie (Z) process, as reports paste it beside the table
# above: USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND. A stopped process keeps its
# GPU memory until it is continued or killed; its state is the only literal on the row.
_STOPPED_STATES = ("T", "Tl", "T+", "Ts", "Tsl", "Tl+", "Z", "Zl", "Z+", "Zs")

signature(
    "ps.stopped_process",
    r"^(?P<user>[\w.@-]+)\s+(?P<pid>\d+)\s+\d+(?:\.\d+)?\s+\d+(?:\.\d+)?\s+\d+\s+\d+\s+\S+\s+"
    r"(?P<state>[TZ][a-zA-Z<+]*)\s+\S+\s+\d+:\d\d\s+(?P<command>\S.*?)\s*$",
    anchors=tuple(f" {state} " for state in _STOPPED_STATES),
    summary="`ps aux`'s row of a stopped (state T) or zombie (Z) process",
    extract=lambda found: {
        "pid": int(found["pid"]),
        "user": found["user"],
        "state": found["state"],
        "command": found["command"][:160],
    },
)
