"""Evidence from logs: every known failure signature and every traceback or stack dump.

`scan_logs` reads every log with the bounded scanner (`triage.readers.logscan`), on every
core, and turns its hits into evidence: one item per kept signature line and per traceback
or stack dump, each attributed to a rank where the log shows it; a stack dump of a rank's
main thread also becomes that rank's classified state. Frequent lines (NCCL's per-op COLL
lines) become one `log_series` item per file and communicator, and a note says how many
were folded so.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from triage.models import Evidence, Gap
from triage.observations import LogFile, LogSignal, RankState, TracebackRecord
from triage.observations.log_lines import LogSeries, is_printed
from triage.readers import signatures
from triage.readers.log_prefilter import MAX_LINE
from triage.readers.log_series import Tally
from triage.readers.logscan import ScanResult, dump_state, scan_files
from triage.registry import ToolError, ToolOutput, tool
from triage.text import agree, bound_text, plural


@tool(name="scan_logs")
def scan_logs(log_files: list[str]) -> ToolOutput:
    """Read logs of any size (streamed on every core, bounded memory) and report every known
    failure signature (NCCL errors and warnings, watchdog timeouts, c10d/rendezvous errors,
    CUDA and host OOM, launcher reports, DDP errors, ...) and every Python traceback or stack
    dump, each attributed to a rank from `[rankN]:`/NCCL prefixes or per-rank file names.
    Per-op NCCL COLL lines are folded into one series per rank and communicator: count,
    first and last lines, and the last opCount."""
    if not log_files:
        raise ToolError("no log files to read")
    evidence: list[Evidence] = []
    gaps: list[Gap] = []
    ids: Counter[str] = Counter()
    results: list[ScanResult] = []
    for name, scanned in zip(log_files, scan_files([Path(n) for n in log_files]), strict=True):
        if isinstance(scanned, OSError):
            reason = f"cannot read: {scanned.strerror or scanned}"
            gaps.append(Gap(source=name, reason=reason, tool="scan_logs"))
        else:
            results.append(scanned)
    for result in results:
        evidence += _evidence(result, ids)
        if result.dropped:
            reason = (
                f"{plural(result.dropped, 'repeated signature line')} "
                f"{agree(result.dropped, 'were')} not kept: the first and last of each kind, "
                "per rank, are"
            )
            gaps.append(Gap(source=result.path, reason=reason, tool="scan_logs"))
    notes = [note for result in results if (note := _folded(result))] + [
        f"{Path(r.path).name}: its lines were cut at {r.unwrapped} columns (a terminal's"
        " copy) and were read joined again"
        for r in results
        if r.unwrapped
    ]
    signals = sum(1 for e in evidence if e.kind == "log_signal")
    failures = sum(
        1 for e in evidence if e.kind == "log_signal" and not is_printed(e.data["signature"])
    )
    tracebacks = sum(1 for e in evidence if e.kind == "traceback")
    text = (
        f"{plural(len(log_files), 'file')}: {plural(signals, 'signature line')}, "
        f"{plural(tracebacks, 'traceback/stack dump')}"
    )
    if not failures and not tracebacks:
        gaps.append(
            Gap(
                source=log_files[0] if len(log_files) == 1 else plural(len(log_files), "file"),
                reason="no known failure signature or traceback in the logs",
                hint="If the job failed, its error is not in these lines: look in the other "
                "ranks' logs, the launcher's output, or the rest of this log if this is a part.",
                tool="scan_logs",
            )
        )
    return ToolOutput(evidence=evidence, gaps=gaps, text=text, notes=notes)


def _evidence(result: ScanResult, ids: Counter[str]) -> list[Evidence]:
    out: list[Evidence] = []
    name = Path(result.path).name

    def unique(base: str) -> str:
        ids[base] += 1
        return base if ids[base] == 1 else f"{base}#{ids[base]}"

    for sig in result.signals:
        out.append(
            Evidence(
                id=unique(f"log:{name}:{sig.line}:{sig.signature}"),
                kind=LogSignal.EVIDENCE_KIND,
                source=f"{result.path}:{sig.line}",
                rank=sig.rank,
                summary=f"{sig.signature}: {sig.text[:200]}",
                data=sig.model_dump(exclude_defaults=True),
                excerpt=sig.text[:MAX_LINE],
            )
        )
    for record in result.tracebacks:
        out += _traceback_evidence(record, unique(f"tb:{name}:{record.line}"))
    for tally in result.series:
        evidence_id = unique(f"series:{name}:{tally.writer}{tally.key}")
        out.append(_series_evidence(result.path, tally, evidence_id))
    rank = result.rank
    info = LogFile(
        path=result.path,
        size=result.size,
        rank=rank,
        lines=result.lines,
        truncated_hits=result.dropped,
        last_line=result.last_line,
        tail=result.tail,
        aggregated=result.aggregated,
        noise=result.noise,
    )
    found = plural(len(result.signals), "signature line") if out else "no failure signature"
    out.append(
        Evidence(
            id=unique(f"file:{name}"),
            kind=LogFile.EVIDENCE_KIND,
            source=result.path,
            rank=rank,
            summary=f"{plural(result.lines, 'line')}, {found}",
            data=info.model_dump(exclude_defaults=True),
            excerpt=result.last_line,
        )
    )
    return out


def _series_evidence(path: str, tally: Tally, evidence_id: str) -> Evidence:
    """One series: its count, its span and its last line's fields (how far it got)."""
    latest = tally.latest
    series_of = signatures.SIGNATURES[tally.signature].series
    name = f"{series_of.key} {tally.key}" if series_of and series_of.key else tally.key
    label = f"{tally.signature} {name}" if name else tally.signature
    series = LogSeries(
        signature=tally.signature,
        writer=tally.writer,
        name=name,
        path=path,
        rank=latest.rank,
        count=tally.count,
        first_line=tally.signals[0].line,
        last_line=latest.line,
        last=latest.fields,
    )
    return Evidence(
        id=evidence_id,
        kind=LogSeries.EVIDENCE_KIND,
        source=f"{path}:{tally.signals[0].line}-{latest.line}",
        rank=latest.rank,
        summary=f"{label}: {plural(tally.count, 'line')}, the last at "
        f"line {latest.line}: {latest.text[:160]}",
        data=series.model_dump(exclude_defaults=True),
        excerpt=latest.text[:MAX_LINE],
    )


def _folded(result: ScanResult) -> str:
    """What the scan counted instead of keeping, for the report's notes."""
    parts = []
    if result.aggregated:
        names = sorted({t.signature for t in result.series})
        parts.append(
            f"{plural(result.aggregated, 'frequent line')} ({', '.join(names)}) folded into "
            f"{len(result.series):,} series: counts, first and last lines, last values"
        )
    if result.noise:
        parts.append(f"{plural(result.noise, 'line')} with an anchor but no signature counted")
    return f"{Path(result.path).name}: {'; '.join(parts)}" if parts else ""


def _traceback_evidence(record: TracebackRecord, evidence_id: str) -> list[Evidence]:
    """The traceback or dump itself; a dump of a rank's main thread also becomes that rank's
    classified state (kind "stack"), so pasted py-spy and faulthandler dumps of several
    ranks reach the hang rules the way live py-spy dumps do."""
    what = "stack dump" if record.dump else (record.exception or "traceback")
    where = f" at {record.user_frame.file}:{record.user_frame.line}" if record.user_frame else ""
    message = f": {record.message[:160]}" if record.message else ""
    lines = [f'  File "{f.file}", line {f.line}, in {f.function}' for f in reversed(record.frames)]
    excerpt = bound_text("\n".join(lines + [f"{record.exception or ''}{message}"]), 2000)
    out = [
        Evidence(
            id=evidence_id,
            kind=TracebackRecord.EVIDENCE_KIND,
            source=f"{record.path}:{record.line}",
            rank=record.rank,
            summary=f"{what}{where}{message}",
            data=record.model_dump(exclude_defaults=True),
            excerpt=excerpt,
        )
    ]
    state = dump_state(record)
    if state is not None:
        who = f"rank {state.rank}" if state.rank is not None else f"pid {state.pid}"
        at = f" at {state.user_frame.location()}" if state.user_frame else ""
        out.append(
            Evidence(
                id=evidence_id.replace("tb:", "stack:", 1),
                kind=RankState.EVIDENCE_KIND,
                source=f"{record.path}:{record.line}",
                rank=state.rank,
                summary=f"{who} (stack dump in a log): {state.describe()}{at}",
                data=state.model_dump(mode="json"),
                excerpt=excerpt,
            )
        )
    return out
