"""Values a job printed about itself: a rank's own prints, and training or evaluation metrics.

When results are wrong, people print what each rank holds (`rank 0: amp=False`,
`Rank 1. Batch idx: 6, cuts: [...]`, `[rank 0] param sum: 1234.5`) and paste the metrics
that worry them (`loss: 1.44 | grad_norm: 4.73`, `Acc@1 69.76`, `Mean SISNR is 6.2`).
Neither is a failure line: the prints are compared across ranks (state that must match and
does not, data that must differ and does not), and metrics with nothing failing beside
them say the report is about the numbers.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature

#: The family of these signatures: lines a job printed about itself, none of them a failure.
FAMILY = "printed."


def is_printed(name: str) -> bool:
    """Whether a signature is one of these: not a failure line."""
    return name.startswith(FAMILY)


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
    # not `rank` alone: torchrun's `[rank3]:` prefix opens every line of its workers
    anchors=tuple(f"{word}{sep}" for word in ("rank", "Rank", "RANK") for sep in " :=#"),
    summary="a line a rank printed about its own state or data (compared across ranks)",
    extract=_rank_print,
)

# A tensor-parallel rank's own line: `TP3: batch_size()=25, ...`, or an inference engine's
# log prefix naming it (`[2025-02-22 08:19:45 TP26] ...`). The ranks of one tensor-parallel
# group run in lockstep on the same inputs.
signature(
    "printed.tp_rank_value",
    r"^\W{0,2}(?:\[[^\]]{0,40}?\b)?TP(?P<tp_rank>\d{1,4})\b(?:\]|:)\s*(?P<body>\S.{2,})$",
    anchors=tuple(f"TP{digit}" for digit in "0123456789"),
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
    anchors=tuple(f"{word}{sep}" for word in ("rank", "Rank", "RANK") for sep in " :="),
    summary="a process's own report of its rank and the world size",
    extract=lambda found: {"rank_seen": int(found["rank"]), "world": int(found["world"])},
)

# --- training and evaluation metrics -------------------------------------------------------

_METRIC_WORDS = (
    "loss",
    "acc",
    "accuracy",
    "precision",
    "recall",
    "perplexity",
    "ppl",
    "reward",
    "grad_norm",
    "gradnorm",
    "bleu",
    "rouge",
    "wer",
    "cer",
    "miou",
    "sisnr",
    "si-snr",
    "psnr",
    "ssim",
    "auc",
    "f1",
    "map",
    "ap",
)
_METRIC = "|".join(re.escape(word) for word in sorted(_METRIC_WORDS, key=len, reverse=True))

#: Words that occur inside ordinary words (`lower`, `capacity`) anchor only as written.
_AS_WRITTEN = {
    "ap": ("AP",),
    "map": ("mAP", "MAP"),
    "miou": ("mIoU", "MIOU", "miou"),
    "wer": ("WER",),
    "cer": ("CER",),
    "auc": ("AUC",),
}

signature(
    "printed.metric",
    # a metric's name, then `@k` and a number (`Acc@1 69.76`), or an optional qualifier
    # (`(AP) @[ IoU=0.50 ]`, `/mean@1`) and `:`, `=` or `is` before it, or a space alone
    # (`loss 2.31`); a name may go on (`loss_rpn_cls: 2.57`)
    # (a terminal's colour code may stand before the name where its ESC was lost: `[32mloss`)
    rf"(?i)(?:\b|(?<=\[\dm)|(?<=\[\d\dm))"
    rf"(?P<metric>(?:(?:train|val|valid|test|eval|mean|avg|top-?[15]|box|mask)[ _/-]?)?"
    rf"(?:{_METRIC})(?:_[a-z0-9]+)*)(?:@\d+\s+|\b(?:[^\n:=]{{0,60}}?(?:[:=]|\bis\b)\s*|\s+))"
    r"(?P<value>-?\d*\.\d+(?:e[-+]?\d+)?|-?\d+(?:e[-+]?\d+)?)\b",
    anchors=tuple(
        variant
        for word in _METRIC_WORDS
        for variant in _AS_WRITTEN.get(word, (word, word.capitalize(), word.upper()))
    ),
    summary="a training or evaluation metric the job printed",
)
