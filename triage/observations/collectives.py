"""Flight Recorder: where each process group stands, read across every rank's dump."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from triage.models import Location
from triage.observations.payload import Payload
from triage.text import format_ranks


class FROp(Payload):
    """One recorded op as the report shows it."""

    op: str
    seq: int
    p2p: bool = False
    group: str
    state: str
    done: bool = Field(default=False, description="Finished, or retired by the backend.")
    input_sizes: list[list[int]] = Field(default_factory=list)
    input_dtypes: list[str] = Field(default_factory=list)
    output_sizes: list[list[int]] = Field(default_factory=list)
    peer: int | None = Field(default=None, description="Global rank at the other end.")
    location: Location | None = Field(default=None, description="User line that called it.")
    text: str = ""


class FRSide(Payload):
    """Ranks of one group in one state at the group's stuck point."""

    state: str = Field(
        description="waiting (the majority, in the stuck op), other_op, other_shape, behind "
        "(not finished where others have), lagging (its GPU never started the op), entered, "
        "idle (never enqueued it, nothing pending), "
        "elsewhere (blocked in another op), no_dump, unreadable, unknown."
    )
    ranks: list[int]
    op: FROp | None = None
    waits_in: str | None = Field(default=None, description="'group:seq' or 'p2p' for elsewhere.")
    novel: bool = Field(
        default=False, description="Its op appears in none of the group's recent collectives."
    )

    def describe(self) -> str:
        """'ranks 1-3 wait in all_reduce seq 7 (pending) at train.py:40' and the like."""
        one = len(self.ranks) == 1
        who = f"rank{'' if one else 's'} {format_ranks(self.ranks)}"
        op = self.op
        text = op.text if op else None
        at = f" at {Path(op.location.file).name}:{op.location.line}" if op and op.location else ""
        wait, be, have = ("waits", "is", "has") if one else ("wait", "are", "have")
        what = {
            "waiting": f"finished {(text or '').removesuffix(' (finished)')}{at} and {wait} further on"
            if op and op.done
            else f"{wait} in {text or 'the collective'}{at}",
            "other_op": f"{be} in {text or 'another op'}{at} instead",
            "other_shape": f"entered it as {text or '?'}{at}: other sizes or dtypes",
            "lagging": f"enqueued it but {'its' if one else 'their'} GPU never started it{at}",
            "behind": f"{have} not finished it ({text or '?'}){at}",
            "entered": f"entered it{at}",
            "idle": f"never enqueued it and {wait} in no collective; last op {text or 'none'}{at}",
            "elsewhere": f"never enqueued it: blocked in {text or self.waits_in}{at}",
            "no_dump": "left no dump",
            "no_group": "never created this group (not in its dump's groups)",
            "unreadable": "left a dump that could not be read",
            "unknown": f"{have} no op of this group in {'its' if one else 'their'} buffer",
        }.get(self.state, self.state)
        return f"{who} {what}"


class FROutlier(Payload):
    """Ranks of one group that are not where the group's majority waits."""

    EVIDENCE_KIND: ClassVar[str] = "fr_outlier"

    group: str
    desc: str = ""
    seq: int
    members: int
    world: int
    side: FRSide


class FRStuckGroup(Payload):
    """A process group whose oldest unfinished collective some members never reached."""

    EVIDENCE_KIND: ClassVar[str] = "fr_stuck"

    group: str
    desc: str = ""
    members: int
    membership: str = Field(description="config (from the dumps), world, or observed.")
    world: int
    seq: int
    sides: list[FRSide]
    more_ranks: int = 0
    waits_on: list[str] = Field(default_factory=list)
    root: bool = Field(description="False when its outliers only wait in another stuck point.")

    def evidence_id(self) -> str:
        return f"fr:group{self.group}:seq{self.seq}"

    def side_evidence_id(self, side: FRSide) -> str:
        """The id of the outlier evidence the tool writes for `side`."""
        ranks = format_ranks(side.ranks)
        if len(ranks) > 40:
            ranks = f"{len(side.ranks)}ranks{side.ranks[0]}"
        return f"fr:group{self.group}:seq{self.seq}:{side.state}:{ranks}"


class FRP2PWait(Payload):
    """Ranks blocked in point-to-point ops that no peer matches."""

    EVIDENCE_KIND: ClassVar[str] = "fr_p2p"

    ranks: list[int] = Field(description="Every rank waiting in it.")
    culprits: list[int] = Field(description="The cycle, or the rank at the end of the chain.")
    cycle: bool
    sink: int | None = None
    sink_state: str = ""
    ops: dict[int, FROp] = Field(default_factory=dict)


class FROverview(Payload):
    """What the dumps cover."""

    EVIDENCE_KIND: ClassVar[str] = "fr_overview"

    dumps: int
    ranks: str = Field(description="Ranks with a dump, compressed: '0-4095'.")
    world: int
    missing: list[int] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    backends: list[str] = Field(default_factory=list)
    groups: int
    stuck_groups: int
    entries: int
    files: list[str] = Field(default_factory=list, description="A few of the files read.")
