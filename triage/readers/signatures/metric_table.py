"""Results by GPU count, as reports tabulate them: a Markdown table whose first column is
the number of GPUs (`| GPUs | train_loss | eval_loss |`, one row per run).

The rows carry no anchor of their own, so the header asks the first pass for the lines
after it, and the block parser joins the table into one line (`GpuTable`) that
`generic.metric_table` reads: each row's GPU count and its numbers, by column.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import block_anchor, signature

TITLE = "results by GPU count:"

#: The first column's name: how many GPUs (or processes) the row's run used.
_COUNT = r"(?:#\s*|num[_ ]|n[_ ])?(?:GPUs?|gpus?|GPU count|[Ww]orld[_ ]size|nproc(?:_per_node)?)"
HEADER = re.compile(rf"^\|\s*{_COUNT}\s*\|(?P<columns>.+?)\|?\s*$")
_ROW = re.compile(r"^\|\s*(?P<gpus>\d{1,4})\s*\|(?P<cells>.+?)\|?\s*$")
_RULE = re.compile(r"^\|?\s*:?-{3,}")
_NUMBER = re.compile(r"^(?P<value>-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*(?:x|%)?$")
#: Rows a table may have before the rest is left out.
MAX_ROWS = 16

#: Text a header holds: the first pass keeps the rows after it, and the parser wakes on it.
ANCHORS = ("| GPUs", "|GPUs", "| GPU |", "| gpus", "| #GPUs", "| num_gpus", "| world_size")
for _anchor in ANCHORS:
    block_anchor(_anchor, MAX_ROWS + 2)


class GpuTable:
    """One table, read line by line; `text()` joins it into one line."""

    def __init__(self, header: str) -> None:
        found = HEADER.match(header.strip())
        names = found["columns"].split("|") if found else []
        self.columns = [re.sub(r"[\s=;]+", "_", name.strip()) for name in names]
        self.rows: list[str] = []
        #: It ends at the first line that is not its own (`feed` returns False).
        self.done = False

    def feed(self, line: str) -> bool:
        """Take the table's next line; False when the line is not the table's (it ended)."""
        text = line.strip()
        if _RULE.match(text):
            return True
        row = _ROW.match(text)
        if row is None or len(self.rows) >= MAX_ROWS:
            return False
        cells = [c.strip() for c in row["cells"].split("|")]
        numbers = [
            f"{name}={number['value']}"
            for name, cell in zip(self.columns, cells, strict=False)
            if name and (number := _NUMBER.match(cell))
        ]
        if numbers:
            self.rows.append(f"gpus={row['gpus']} " + " ".join(numbers))
        return True

    def text(self) -> str | None:
        """'results by GPU count: gpus=1 eval_loss=0.5536; gpus=8 eval_loss=4.436', None
        without two rows to compare."""
        return f"{TITLE} " + "; ".join(self.rows) if len(self.rows) > 1 else None


def _rows(found: re.Match[str]) -> dict[str, Any]:
    rows = []
    for part in found["rows"].split("; "):
        fields = dict(item.split("=", 1) for item in part.split() if "=" in item)
        gpus = fields.pop("gpus", "")
        if gpus.isdigit():
            rows.append({"gpus": int(gpus), "values": {k: float(v) for k, v in fields.items()}})
    return {"rows": rows}


signature(
    "generic.metric_table",
    rf"^{re.escape(TITLE)} (?P<rows>gpus=\d+ .+)$",
    anchors=TITLE,
    summary="a table of results for several GPU counts (joined from its rows)",
    extract=_rows,
)
