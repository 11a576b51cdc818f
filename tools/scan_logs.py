"""Evidence from logs: every known failure signature and every traceback or stack dump.

`scan_logs` reads every log with the bounded scanner (`triage.readers.logscan`) and
turns its hits into evidence: one item per matched signature line and per traceback or
stack dump, each attributed to a rank where the log shows it; a stack dump of a rank's
main thread also becomes that rank's classified state.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from triage.models import Evidence, Gap
from triage.observations import LogFile, LogSignal, RankState, TracebackRecord
from triage.readers.log_prefilter import MAX_LINE
from triage.readers.logscan import ScanResult, dump_state, learn_ranks, scan_log
from triage.registry import ToolError, ToolOutput, tool
from triage.text import bound_text


@tool(name="scan_logs")
def scan_logs(log_files: list[str]) -> ToolOutput:
    """Read logs of any size (streamed, bounded memory) and report every known failure
    signature (NCCL errors and warnings, watchdog timeouts, c10d/rendezvous errors, CUDA
    and host OOM, launcher reports, DDP errors, ...) and every Python traceback or stack
    dump, each attributed to a rank from `[rankN]:`/NCCL prefixes or per-rank file names."""
    if not log_files:
        raise ToolError("no log files to read")
    evidence: list[Evidence] = []
    gaps: list[Gap] = []
    ids: Counter[str] = Counter()
    results: list[ScanResult] = []
    for name in log_files:
        try:
            results.append(scan_log(Path(name)))
        except OSError as exc:
            gaps.append(
                Gap(source=name, reason=f"cannot read: {exc.strerror or exc}", tool="scan_logs")
            )
    learn_ranks(results)
    for result in results:
        name = result.path
        evidence += _evidence(result, ids)
        if result.dropped:
            gaps.append(
                Gap(
                    source=name,
                    reason=f"{result.dropped} matching lines in the middle of the file were not kept",
                    tool="scan_logs",
                )
            )
    signals = sum(1 for e in evidence if e.kind == "log_signal")
    tracebacks = sum(1 for e in evidence if e.kind == "traceback")
    text = f"{len(log_files)} files: {signals} signature lines, {tracebacks} tracebacks/stack dumps"
    if not signals and not tracebacks:
        gaps.append(
            Gap(
                source=log_files[0] if len(log_files) == 1 else f"{len(log_files)} files",
                reason="no known failure signature or traceback in the logs",
                hint="collect every rank's log with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL, "
                "and the launcher's output (torchrun --redirects 3 --tee 3)",
                tool="scan_logs",
            )
        )
    return ToolOutput(evidence=evidence, gaps=gaps, text=text)


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
    rank = result.rank
    info = LogFile(
        path=result.path,
        size=result.size,
        rank=rank,
        lines=result.lines,
        truncated_hits=result.dropped,
        last_line=result.last_line,
    )
    found = f"{len(result.signals)} signature lines" if out else "no failure signature"
    out.append(
        Evidence(
            id=unique(f"file:{name}"),
            kind=LogFile.EVIDENCE_KIND,
            source=result.path,
            rank=rank,
            summary=f"{result.lines} lines, {found}",
            data=info.model_dump(exclude_defaults=True),
            excerpt=result.last_line,
        )
    )
    return out


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
