"""Training and evaluation metrics in a line: `loss: 1.44 | grad_norm: 4.73`, `Acc@1 69.76`,
`Mean SISNR is 6.2`, COCO's `Average Precision (AP) ... = 0.356`.

A training log prints them on every line, so they are no signature (whose anchors must be
rare for the scan to stay fast): the rules read them from where a log ends (`LogFile`'s
last line), which is what a paste of worrying numbers ends on.
"""

from __future__ import annotations

import re

_ANY_CASE = (
    "loss|accuracy|acc|precision|recall|perplexity|ppl|reward|grad_?norm|bleu|rouge|"
    "si-?snr|psnr|ssim|f1|top-?[15]"
)
#: Short names that are also parts of words (`map`, `wer`): only as metrics write them.
_AS_WRITTEN = "AP|mAP|MAP|mIoU|MIOU|miou|WER|CER|AUC"

METRIC = re.compile(
    # a terminal's colour code may stand before the name where its ESC was lost (`[32mloss`)
    r"(?:\b|(?<=\[\dm)|(?<=\[\d\dm))"
    rf"(?P<metric>(?:(?i:train|val|valid|test|eval|mean|avg|box|mask)[ _/-]?)?"
    rf"(?:(?i:{_ANY_CASE})|{_AS_WRITTEN})(?:_[a-z0-9]+)*)"
    # then `@k` and a number (`Acc@1 69.76`), or a qualifier (`(AP) @[ IoU=0.50 ]`) and `:`,
    # `=` or `is`, or a space alone (`loss 2.31`)
    r"(?:@\d+\s+|\b(?:[^\n:=]{0,60}?(?:[:=]|\bis\b)\s*|\s+))"
    r"(?P<value>-?\d*\.\d+(?:[eE][-+]?\d+)?|-?\d+(?:[eE][-+]?\d+)?)\b"
)


def metric_in(line: str) -> str | None:
    """The first metric's name in the line, or None."""
    found = METRIC.search(line)
    return found["metric"] if found else None


#: A printed tensor (`tensor([0., 0., 0.0078], device='cuda:0')`, a DTensor's local value).
_TENSOR = re.compile(r"\b(?:D?Tensor|tensor)\((?:\[+|local_tensor=)?\s*-?\d")
_TOKEN = re.compile(r"[^\s|,;()\[\]]+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?%?")
#: A logger's line (its level, a process tag) or a progress bar is the program's record of
#: itself, not a value it printed.
_LOGGED = re.compile(r"\b(?:INFO|WARN(?:ING)?|DEBUG|ERROR)\b|Warning\b|\bpid=\d|\d%\||\bit/s\b")


def values_in(line: str) -> bool:
    """Whether the line is values a program printed: a metric, a tensor, or a row that is
    mostly numbers (a results table's `456 | 2.249 | 76.35`), not a logger's line."""
    if metric_in(line):
        return True
    if _LOGGED.search(line):
        return False
    if _TENSOR.search(line):
        return True
    tokens = _TOKEN.findall(line)
    numbers = sum(1 for token in tokens if _NUMBER.fullmatch(token))
    return numbers >= 3 and numbers >= 0.6 * len(tokens)
