"""How a host's GPUs are linked, as reports paste it: `nvidia-smi topo -m` rows and the names
of consumer cards. GPUs that reach each other only over PCIe use peer-to-peer through the
PCIe fabric (or none: GeForce cards since the 40 series), the usual suspect when a one-host
job hangs in its first collective or copies zeros between GPUs.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

_LINK = r"(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)"


def _links(found: re.Match[str]) -> dict[str, Any]:
    return {"gpu": int(found["gpu"]), "links": found["links"].split()}


# `GPU0     X      NODE    0-63            0`: one row of the topology matrix, its links to
# each GPU (X itself, NV# NVLink, PIX/PXB/PHB/NODE/SYS paths through PCIe and the CPUs).
signature(
    "gpu.topology_row",
    rf"^\s*GPU(?P<gpu>\d+)\s+(?P<links>(?:{_LINK}\s+)+{_LINK})\b",
    anchors=tuple(f"GPU{digit}" for digit in "0123456789"),
    summary="a row of `nvidia-smi topo -m`: how one GPU reaches the others",
    extract=_links,
)

# GeForce (and TITAN) cards: no peer-to-peer over PCIe on the 40 series and later, and on the
# older ones only where the board and the IOMMU let it through.
signature(
    "gpu.consumer_card",
    r"\b(?:GeForce )?(?P<card>RTX ?[2-5]0[5-9]0(?: ?Ti| SUPER)?|GTX ?1[06][5-8]0(?: ?Ti)?"
    r"|TITAN (?:RTX|Xp?|V))\b",
    anchors=("RTX", "GTX", "TITAN"),
    summary="a consumer GPU (GeForce, TITAN) named in the text",
)
