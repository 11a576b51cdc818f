"""Anchors of multi-line blocks: tracebacks, stack dumps and launcher reports.

They name no failure themselves; the first pass keeps the lines after them so that the
block parsers (`triage.readers.log_blocks`) see the whole block. Registered with the
signatures so that every process that scans (a pool's workers too) looks for the same set.
"""

from __future__ import annotations

from triage.readers.signatures import block_anchor

TRACEBACK_START = "Traceback (most recent call last):"
#: Every traceback's header holds these words: IPython's (a notebook's) puts the exception's
#: type before them and no colon after.
TRACEBACK_WORDS = "Traceback (most recent call last)"
#: rich's boxed traceback opens with this inside its top border.
RICH_TRACEBACK_START = "Traceback (most recent call last) ─"
FAILED_COLLECTIVE_START = "Stack trace of the failed collective:"
#: A traceback's last line pasted alone (`RuntimeError: ...`): the exception is the failure
#: even without its frames.
EXCEPTION_ANCHORS = ("Error:", "Exception:")

for _anchor, _after in (
    (TRACEBACK_WORDS, 400),
    (RICH_TRACEBACK_START, 800),
    ("│", 0),  # a rich traceback's box pasted without its top line, and its bottom
    ("╰", 0),
    ("(most recent call first):", 200),
    (" (idle)", 200),  # py-spy's thread header, with the thread's name or (unnamed) without
    (" (active)", 200),
    (" (active+gil)", 200),
    ("Process ", 1),  # py-spy's `Process PID: cmdline`, confirmed by `Python vX.Y` below it
    ('File "', 1),
    ("File /", 12),  # IPython's frame, its numbered source lines after it
    (".py in ", 12),  # IPython 7's frame
    ("<ipython-input-", 12),
    ("Root Cause (first observed failure):", 12),
    (FAILED_COLLECTIVE_START, 80),
    ("Failures:", 60),
    *((anchor, 0) for anchor in EXCEPTION_ANCHORS),
):
    block_anchor(_anchor, _after)
