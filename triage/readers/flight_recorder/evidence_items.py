"""An alignment as evidence items and gaps: what the report shows of Flight Recorder dumps,
whether they were read from files (`read_flight_recorder`) or fetched from a running job
(`read_debug_server`)."""

from __future__ import annotations

import os
from pathlib import Path

from triage.models import Evidence, Gap
from triage.observations import FROutlier, FROverview, FRP2PWait, FRSide, FRStuckGroup
from triage.readers.flight_recorder.alignment import Analysis
from triage.readers.flight_recorder.evidence_payloads import (
    outlier_payload,
    overview,
    p2p_payload,
    stuck_payload,
    summarize,
)
from triage.text import format_ranks

CAPTURE_HINT = (
    "dump every rank: NCCL writes them on a timeout with TORCH_FR_BUFFER_SIZE=2000 "
    "TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/shared/fr/rank_; on "
    "gloo call torch._C._distributed_c10d._dump_fr_trace() in each rank (e.g. from a "
    "signal handler) and write the bytes to one file per rank"
)


def coverage_gaps(analysis: Analysis, tool: str, hint: str = CAPTURE_HINT) -> list[Gap]:
    """Ranks with no dump, dumps of one rank read twice, and dumps named for another rank."""
    gaps = []
    if analysis.missing:
        gaps.append(
            Gap(
                source="flight recorder",
                reason=f"no dump from rank {format_ranks(analysis.missing)} of "
                f"{len(analysis.world)}: exited, never dumped, or its file was not collected",
                hint=hint,
                tool=tool,
            )
        )
    for kept, dropped in analysis.duplicates[:5]:
        gaps.append(
            Gap(
                source=dropped,
                reason=f"dump of the same rank as {kept}: that one was read",
                tool=tool,
            )
        )
    renamed = [d for d in analysis.dumps.values() if d.name_rank not in (None, d.rank)]
    for dump in renamed[:5]:
        gaps.append(
            Gap(
                source=dump.path,
                reason=f"named rank {dump.name_rank} but its process groups say rank "
                f"{dump.rank}; read as rank {dump.rank}",
                tool=tool,
            )
        )
    return gaps


def analysis_evidence(analysis: Analysis, source: str | None = None) -> list[Evidence]:
    """The overview first, then each stuck group with its outliers, then p2p waits.
    `source` names where the dumps came from (default: their folder)."""
    source = source or _source(analysis)
    world = len(analysis.world)
    summary = overview(analysis)
    backends = ", ".join(summary.backends) or "unknown backend"
    versions = ", ".join(summary.versions) or "?"
    roots = [f"group {p.group.name} at seq {p.seq}" for p in analysis.stuck if p.root]
    stuck = (
        f"{len(analysis.stuck)} stuck, where the ranks part: {', '.join(roots[:3])}"
        if analysis.stuck
        else "no group has unfinished collectives"
    )
    head = (
        f"Flight Recorder: {summary.dumps} rank dumps ({backends}, format {versions}), "
        f"{summary.entries} entries, {summary.groups} process groups, {stuck}"
        + (f"; no dump from rank {format_ranks(summary.missing)}" if summary.missing else "")
    )
    items = [
        Evidence(
            id="fr:overview",
            kind=FROverview.EVIDENCE_KIND,
            source=source,
            summary=head,
            data=summary.model_dump(exclude_defaults=True),
        )
    ]
    seen: set[str] = set()
    for point in analysis.stuck:
        payload = stuck_payload(point, world)
        if payload.evidence_id() in seen:
            continue  # a group name reused by split_group: the first stuck one is shown
        seen.add(payload.evidence_id())
        items.append(
            Evidence(
                id=payload.evidence_id(),
                kind=FRStuckGroup.EVIDENCE_KIND,
                source=source,
                summary=summarize(payload),
                data=payload.model_dump(exclude_defaults=True),
            )
        )
        if point.root:
            items += [
                _outlier(payload, s, analysis, source)
                for s in payload.sides
                if s.state != "waiting"
            ]
    for wait in analysis.p2p:
        waiting = p2p_payload(wait, analysis)
        kind = "cycle" if wait.cycle else f"chain to rank {wait.sink} ({wait.sink_state})"
        items.append(
            Evidence(
                id=f"fr:p2p:{format_ranks(wait.ranks)[:40]}",
                kind=FRP2PWait.EVIDENCE_KIND,
                source=source,
                rank=wait.ranks[0] if len(wait.ranks) == 1 else None,
                summary=f"ranks {format_ranks(wait.ranks)} wait in send/recv no peer matches: {kind}; "
                + "; ".join(f"rank {r} in {op.text}" for r, op in list(waiting.ops.items())[:4]),
                data=waiting.model_dump(exclude_defaults=True),
            )
        )
    return items


def _outlier(point: FRStuckGroup, side: FRSide, analysis: Analysis, source: str) -> Evidence:
    """Ranks not where their group waits: the evidence a finding about them cites."""
    payload = outlier_payload(point, side)
    rank = side.ranks[0] if len(side.ranks) == 1 else None
    dump = analysis.dumps.get(rank) if rank is not None else None
    return Evidence(
        id=point.side_evidence_id(side),
        kind=FROutlier.EVIDENCE_KIND,
        source=dump.path if dump else source,
        rank=rank,
        summary=f"group {point.group} seq {point.seq}: {side.describe()}",
        data=payload.model_dump(exclude_defaults=True),
    )


def _source(analysis: Analysis) -> str:
    files = {os.path.dirname(d.path): d.path for d in analysis.dumps.values()}  # one per folder
    folders = {str(Path(path).parent) for path in files.values()}
    return folders.pop() if len(folders) == 1 else f"{len(analysis.dumps)} dump files"
