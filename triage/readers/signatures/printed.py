"""Values a job printed about itself: a rank's own prints, compared across ranks.

When results are wrong, people print what each rank holds (`rank 0: amp=False`,
`Rank 1. Batch idx: 6, cuts: [...]`, `[rank 0] param sum: 1234.5`). None is a failure line:
the rules compare them across ranks (state that must match and does not, data that must
differ and does not). Their anchors are `rank ` and its kin, never `[rank3]:`, the prefix
torchrun puts on every line: a signature's anchors must stay rare for the scan to stay fast.
(Metrics, which a training log prints on every line, are read from where a log ends:
`triage.readers.metric_lines`.)
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

# --- a rank's own print --------------------------------------------------------------------

#: `rank 0: ...`, `Rank 1. ...`, `[rank 0] ...`, `RANK=2 ...`, `Tensor on rank 3: ...`: the
#: rank named at the start of the line (after at most a few words ending in on/of/from/for),
#: then what it printed.
_RANK_PRINT = (
    r"(?i)^\W{0,4}(?:[a-z_][\w ]{0,30}?\b(?:on|of|from|for|in) )?\[?rank\s?[:#=]?\s?"
    r"(?P<rank>\d{1,5})\b\]?(?:\s*/\s*\d+)?[\s:.,|)\]-]+(?P<body>\S.{2,})$"
)


def _rank_print(found: re.Match[str]) -> dict[str, Any]:
    return {"rank": int(found["rank"]), "body": found["body"].strip()[:2000]}


signature(
    "printed.rank_value",
    _RANK_PRINT,
    # not `rank` alone (torchrun's `[rank3]:` prefix opens every line of its workers), nor
    # `Rank ` (DeepSpeed's and Megatron's `[Rank 0] ...` do): `Rank 3:` and `Rank 3.` only
    anchors=tuple(f"{word}{sep}" for word in ("rank", "RANK") for sep in " :=#")
    + tuple(f"Rank {n}{end}" for n in range(128) for end in ":."),
    summary="a line a rank printed about its own state or data (compared across ranks)",
    extract=_rank_print,
)

# A tensor-parallel rank's own line: `TP3: batch_size()=25, ...`. The ranks of one
# tensor-parallel group run in lockstep on the same inputs.
signature(
    "printed.tp_rank_value",
    r"^\W{0,2}TP(?P<tp_rank>\d{1,2}):\s*(?P<body>\S.{2,})$",
    # `TP3:`, not `TP3]`: an engine's own prefix (`[... TP3] ...`) opens every line of its log
    anchors=tuple(f"TP{n}:" for n in range(100)),
    summary="a line a tensor-parallel rank printed about its own inputs (compared across the group)",
    extract=lambda found: {
        "tp_rank": int(found["tp_rank"]),
        "body": found["body"].strip()[:2000],
    },
)

# A process's own report of its rank and world size (`hello from rank -1, world size -1`,
# `rank 1 / size 4`, `RANK=0 WORLD_SIZE=1`): what the process group made of it.
signature(
    "printed.rank_of_world",
    r"(?i)\brank\s?[:=]?\s?(?P<rank>-?\d{1,6})\s?[,;/|]?\s?(?:world[ _]?size|size)\s?[:=]?\s?"
    r"(?P<world>-?\d{1,6})\b",
    anchors=tuple(f"{word}{sep}" for word in ("rank", "RANK") for sep in " :="),
    summary="a process's own report of its rank and the world size",
    extract=lambda found: {"rank_seen": int(found["rank"]), "world": int(found["world"])},
)
