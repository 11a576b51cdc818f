"""An alignment as the observation payloads its evidence carries: the overview, each stuck
group with its sides, the outliers a finding cites, p2p waits, and their one-line text."""

from __future__ import annotations

from triage.models import Location
from triage.observations import FROp, FROutlier, FROverview, FRP2PWait, FRSide, FRStuckGroup
from triage.readers.flight_recorder.alignment import (
    Analysis,
    GroupInfo,
    P2PWait,
    StuckPoint,
    _global_peer,
)
from triage.readers.flight_recorder.dump_records import Entry
from triage.text import format_ranks


def to_op(entry: Entry, group: GroupInfo | None) -> FROp:
    location = (
        Location(file=entry.frame[1], line=entry.frame[2], function=entry.frame[0])
        if entry.frame
        else None
    )
    return FROp(
        op=entry.op,
        seq=entry.seq,
        p2p=entry.p2p,
        group=entry.group,
        state=entry.state,
        done=entry.done,
        input_sizes=[list(s) for s in entry.in_sizes[:8]],
        input_dtypes=list(entry.in_dtypes[:8]),
        output_sizes=[list(s) for s in entry.out_sizes[:8]],
        peer=_global_peer(group, entry) if group and entry.p2p else None,
        location=location,
        text=entry.describe(),
    )


def stuck_payload(point: StuckPoint, world: int) -> FRStuckGroup:
    return FRStuckGroup(
        group=point.group.name,
        desc=point.group.desc,
        members=len(point.group.members),
        membership=point.group.membership,
        world=world,
        seq=point.seq,
        sides=[
            FRSide(
                state=s.state,
                ranks=s.ranks,
                op=to_op(s.entry, point.group if not s.entry.p2p else None) if s.entry else None,
                waits_in=s.waits_in,
                novel=s.novel,
            )
            for s in point.sides
        ],
        more_ranks=point.dropped_sides,
        waits_on=point.waits_on,
        root=point.root,
    )


def p2p_payload(wait: P2PWait, analysis: Analysis) -> FRP2PWait:
    groups = {g.key: g for g in analysis.groups}
    ops = {}
    for rank, entry in wait.entries.items():
        dump = analysis.dumps.get(rank)
        ops[rank] = to_op(entry, groups.get(dump.key_of(entry)) if dump else None)
    return FRP2PWait(
        ranks=wait.ranks,
        culprits=wait.culprits,
        cycle=wait.cycle,
        sink=wait.sink,
        sink_state=wait.sink_state,
        ops=ops,
    )


def overview(analysis: Analysis) -> FROverview:
    dumps = analysis.dumps.values()
    return FROverview(
        dumps=len(analysis.dumps),
        ranks=format_ranks(sorted(analysis.dumps)),
        world=len(analysis.world),
        missing=analysis.missing,
        versions=sorted({d.version for d in dumps if d.version}),
        backends=sorted({d.backend for d in dumps if d.backend}),
        groups=len(analysis.groups),
        stuck_groups=len(analysis.stuck),
        entries=sum(d.entries for d in dumps),
        files=[d.path for d in list(dumps)[:5]],
    )


def summarize(point: FRStuckGroup) -> str:
    head = f"group {point.group}{f' ({point.desc})' if point.desc and point.desc != 'undefined' else ''}"
    parts = "; ".join(s.describe() for s in point.sides)
    more = f"; {point.more_ranks} more ranks in other states" if point.more_ranks else ""
    return f"{head}, {point.members} ranks, stuck at seq {point.seq}: {parts}{more}"


def outlier_payload(point: FRStuckGroup, side: FRSide) -> FROutlier:
    """Ranks not where their group waits: what a finding about them cites."""
    return FROutlier(
        group=point.group,
        desc=point.desc,
        seq=point.seq,
        members=point.members,
        world=point.world,
        side=side,
    )
