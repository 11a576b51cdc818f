"""Evidence from triage.probe snapshots: do the ranks hold the model they should?

`triage.probe.snapshot(model, optimizer, tag=...)` writes one JSON file per rank and call.
This tool finds those files, reads them one at a time (`triage.readers.probe_snapshots`),
compares the ranks at each call (`triage.readers.replica_comparison`: parameters,
gradients and buffers that differ among replicas, missing gradients, NaN/Inf,
placements, meshes) and turns the checks and each file's summary into evidence; files
that cannot be read, older processes of a rank and ranks with no file become gaps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from triage.models import Evidence, Gap
from triage.observations import ReplicaCheck, SnapshotSummary, is_probe_snapshot
from triage.readers.files import files_by_head
from triage.readers.probe_snapshots import (
    MAX_NAMES,
    Choice,
    SnapshotReader,
    UnusableSnapshot,
    call_label,
    choose,
    signal_stack,
    tags_align,
)
from triage.readers.replica_comparison import ReplicaComparison
from triage.readers.stacks import stack_evidence
from triage.registry import ToolError, ToolOutput, tool
from triage.text import format_ranks

MAX_FILES = 100_000
HEAD = 8192
MAX_SUMMARIES = 256
MAX_FILE_GAPS = 20
CAPTURE_HINT = (
    "call triage.probe.snapshot(model, optimizer, tag=f'step {step}') on every rank at the "
    "same point of the loop, and pass the folder with every rank's files"
)


@tool(name="read_probe_snapshots")
def read_probe_snapshots(snapshot_files: list[str]) -> ToolOutput:
    """Read triage.probe snapshot files (one JSON per rank and call; folders are searched)
    and compare the ranks at each call: parameters, gradients and buffers that differ among
    ranks that must hold the same copy (all replicas of DDP or a plain model; DTensors only
    across Replicate mesh dims, never across shards), with the outlier ranks by majority
    vote and the first call at which each differed; trainable parameters with no gradient
    on some ranks; NaN/Inf per rank; placements that differ across ranks or do not fit the
    mesh; meshes that do not fit the world size."""
    paths, gaps = _files(snapshot_files)
    if not paths:
        raise ToolError("no probe snapshot files to read", CAPTURE_HINT)
    reader = SnapshotReader()
    heads, unreadable = reader.heads(paths)
    gaps += [_file_gap(path, reason) for path, reason in unreadable]
    if not heads:
        return ToolOutput(gaps=_bounded(gaps), text=f"none of {len(paths)} snapshots could be read")
    choice = choose(heads)
    gaps += _choice_gaps(choice)
    by_tag = tags_align(choice.chosen)
    comparison = ReplicaComparison()
    summaries: list[SnapshotSummary] = []
    stacks: list[Evidence] = []
    for path, head in choice.chosen:
        try:
            snapshot = reader.load(path)
        except UnusableSnapshot as exc:
            gaps.append(_file_gap(path, str(exc)))
            continue
        label = call_label(head, by_tag)
        summaries.append(reader.summarize(snapshot, path, label))
        state = signal_stack(snapshot) if snapshot.reason == "signal" else None
        if state is not None:
            stacks.append(
                stack_evidence(state, path, "triage.probe, on the signal", f":probe{snapshot.call}")
            )
        comparison.add(snapshot, path, label, head.call, head.tag, reader.shares(snapshot))
    checks = comparison.checks()
    gaps += _coverage_gaps(checks, summaries)
    evidence = _check_evidence(checks) + _summary_evidence(summaries, checks) + stacks
    return ToolOutput(evidence=evidence, gaps=_bounded(gaps), text=_text(checks, summaries))


def _files(given: list[str]) -> tuple[list[str], list[Gap]]:
    """The files given, and the snapshot files under the folders given."""
    files: list[str] = []
    gaps: list[Gap] = []
    for raw in given:
        path = Path(raw)
        if path.is_dir():
            files += files_by_head(path, is_probe_snapshot, HEAD, MAX_FILES)
        elif path.is_file():
            files.append(raw)
        else:
            why = "not a regular file" if path.exists() else "no such file or directory"
            gaps.append(Gap(source=raw, reason=why, tool="read_probe_snapshots"))
    return list(dict.fromkeys(files))[:MAX_FILES], gaps


def _file_gap(path: str, reason: str) -> Gap:
    return Gap(source=path, reason=reason, hint=CAPTURE_HINT, tool="read_probe_snapshots")


def _choice_gaps(choice: Choice) -> list[Gap]:
    """Files left out of the comparison: older processes of a rank, files without a rank."""
    left_out = (
        (
            choice.dropped,
            "snapshots of an earlier process of the same rank (a restart or an older run): "
            "only each rank's latest process was compared",
        ),
        (
            choice.unranked,
            "snapshot without a rank (torch.distributed not initialised): not compared",
        ),
    )
    gaps = []
    for paths, reason in left_out:
        if paths:
            more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
            gaps.append(Gap(source=paths[0] + more, reason=reason, tool="read_probe_snapshots"))
    return gaps


# --- evidence ----------------------------------------------------------------------------


def _check_evidence(checks: list[ReplicaCheck]) -> list[Evidence]:
    items = []
    for check in checks:
        items.append(
            Evidence(
                id=f"replica:{check.label}",
                kind=ReplicaCheck.EVIDENCE_KIND,
                source=_source(check.paths),
                summary=_describe(check),
                data=check.model_dump(exclude_defaults=True),
            )
        )
    return items


def _summary_evidence(
    summaries: list[SnapshotSummary], checks: list[ReplicaCheck]
) -> list[Evidence]:
    """Every file's summary for jobs of a few hundred files; beyond that, the files of the
    ranks the checks name, and the lowest rank of each call, so thousands stay small."""
    if len(summaries) > MAX_SUMMARIES:
        named = {(c.label, r) for c in checks for d in c.diverging for r in d.ranks[:MAX_NAMES]}
        named |= {(c.label, c.ranks[0]) for c in checks if c.ranks}
        summaries = [s for s in summaries if (s.label, s.rank) in named or s.rank is None][
            :MAX_SUMMARIES
        ]
    ids: Counter[str] = Counter()
    items = []
    for summary in summaries:
        who = f"rank{summary.rank}" if summary.rank is not None else f"pid{summary.pid}"
        base = f"probe:{who}:{summary.label}"
        ids[base] += 1
        at = f" at {summary.user_frame.location()}" if summary.user_frame else ""
        wrapped = f", in {'/'.join(summary.wrappers)}" if summary.wrappers else ""
        items.append(
            Evidence(
                id=base if ids[base] == 1 else f"{base}#{ids[base]}",
                kind=SnapshotSummary.EVIDENCE_KIND,
                source=summary.path,
                rank=summary.rank,
                summary=f"{who.replace('rank', 'rank ')} {summary.label}: {summary.parameters} "
                f"parameters ({summary.grads} with grad), {summary.buffers} buffers{wrapped}{at}",
                data=summary.model_dump(exclude_defaults=True),
            )
        )
    return items


def _describe(check: ReplicaCheck) -> str:
    head = f"{check.label}: {len(check.ranks)} ranks, {check.compared} tensors compared"
    if not check.diverging_total:
        return head + ", all replicas identical"
    parts = []
    for what, count in sorted(check.counts.items()):
        shown = [d for d in check.diverging if d.what == what][:3]
        names = ", ".join(f"{d.name} (rank {format_ranks(d.ranks)})" for d in shown)
        more = f" +{count - len(shown)} more" if count > len(shown) else ""
        parts.append(f"{what} {count}: {names}{more}")
    return head + "; differ: " + "; ".join(parts)


def _source(paths: list[str]) -> str:
    folders = {str(Path(p).parent) for p in paths}
    return folders.pop() if len(folders) == 1 else f"{len(paths)} snapshot files"


def _coverage_gaps(checks: list[ReplicaCheck], summaries: list[SnapshotSummary]) -> list[Gap]:
    gaps = []
    for check in checks:
        if check.missing:
            gaps.append(
                Gap(
                    source=f"probe snapshots, {check.label}",
                    reason=f"no snapshot from rank {format_ranks(check.missing)} of "
                    f"{check.world_size}: hung, exited, or its file was not collected",
                    hint=CAPTURE_HINT,
                    tool="read_probe_snapshots",
                )
            )
    if len(checks) == 1 and len(checks[0].ranks) == 1:
        gaps.append(
            Gap(
                source=summaries[0].path if summaries else "probe snapshots",
                reason="snapshots of one rank only: nothing to compare it with",
                hint=CAPTURE_HINT,
                tool="read_probe_snapshots",
            )
        )
    return gaps[:5]


def _bounded(gaps: list[Gap]) -> list[Gap]:
    if len(gaps) <= MAX_FILE_GAPS:
        return gaps
    rest = gaps[MAX_FILE_GAPS:]
    reasons = Counter(gap.reason for gap in rest)
    summary = Gap(
        source=f"{len(rest)} more files",
        reason="; ".join(f"{n} x {r}" for r, n in reasons.most_common(3))[:500],
        tool="read_probe_snapshots",
    )
    return gaps[:MAX_FILE_GAPS] + [summary]


def _text(checks: Iterable[ReplicaCheck], summaries: list[SnapshotSummary]) -> str:
    lines = [f"{len(summaries)} probe snapshots"]
    lines += [_describe(check) for check in checks]
    return "\n".join(lines[:20])
