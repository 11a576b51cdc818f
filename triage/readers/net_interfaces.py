"""Which network interfaces stay on the host: a question the NCCL signatures and the host
checks both ask, kept free of heavy imports so the log scanner's workers start light."""

from __future__ import annotations

import re

_VIRTUAL_IF = re.compile(r"^(?:docker|lo$|lo:|virbr|veth|br-|cali|cni|flannel)")


def is_virtual_interface(name: str) -> bool:
    """docker0, lo, virbr0, veth*, br-*, CNI bridges: interfaces that do not leave the host."""
    return bool(_VIRTUAL_IF.match(name))
