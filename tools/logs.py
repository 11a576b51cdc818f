"""Evidence from files: find what each file is by its content, then read the logs.

`collect_files` walks the paths a user gave (files, folders of per-rank logs, NCCL
debug files, torchelastic error files, dumps) and sorts them by what their first
bytes say, not by their names. `scan_logs` reads every log with the bounded
scanner and turns its hits into evidence: one item per matched signature line and
per traceback or stack dump, each attributed to a rank where the log shows it.
"""

from __future__ import annotations

import json
import tempfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from triage.models import Evidence, Gap
from triage.observations import LogFile, LogSignal, RankState, TracebackRecord, is_probe_snapshot
from triage.readers.files import regular_files
from triage.readers.logscan import MAX_LINE, ScanResult, learn_ranks, scan_file
from triage.readers.stacks import classify
from triage.registry import ToolError, ToolOutput, tool
from triage.text import bound_text

MAX_FILES = 50_000
SNIFF = 8192
MAX_ERROR_FILE = 16 << 20


def sniff(path: Path) -> str:
    """'log', 'pickle', 'json', 'elastic_error', 'probe_snapshot', 'empty' or 'binary', from
    the first bytes."""
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF)
    except OSError:
        return "unreadable"
    if not head:
        return "empty"
    if head[0] == 0x80 and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    if is_probe_snapshot(head):  # even one cut off while written: its reader says so
        return "probe_snapshot"
    if head.lstrip()[:1] in (b"{", b"[") and _looks_like_json(head):
        if b'"message"' in head and (b'"extraInfo"' in head or b'"py_callstack"' in head):
            return "elastic_error"
        return "json"
    if b"\x00" in head:
        return "binary"
    text = head.decode("utf-8", "replace")
    odd = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\n\r\t\f\x1b"))
    return "binary" if odd > len(text) * 0.1 else "log"


def _looks_like_json(head: bytes) -> bool:
    """A JSON document, possibly cut by the sniff window; `[rank0]: ...` log lines are not."""
    text = head.decode("utf-8", "replace").lstrip()
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text) - 1 or exc.msg.startswith("Unterminated string")
        return cut and len(head) == SNIFF
    return not text[end:].strip()


def _walk(paths: list[str]) -> tuple[list[Path], list[Gap]]:
    files: list[Path] = []
    gaps: list[Gap] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in regular_files(path):
                files.append(found)
                if len(files) > MAX_FILES:
                    break
        elif path.is_file():
            files.append(path)
        else:
            why = "not a regular file" if path.exists() else "no such file or directory"
            gaps.append(Gap(source=raw, reason=why, tool="collect_files"))
    if len(files) > MAX_FILES:
        gaps.append(
            Gap(
                source=paths[0],
                reason=f"more than {MAX_FILES} files: only the first {MAX_FILES} were read",
                hint="point triage at the job's own log folder",
                tool="collect_files",
            )
        )
        files = files[:MAX_FILES]
    return files, gaps


@tool(name="collect_files")
def collect_files(paths: list[str]) -> ToolOutput:
    """Sort the given files and folders (recursively) by content: text logs, torchelastic
    error files, triage.probe snapshots, JSON and pickle dumps (Flight Recorder, memory
    snapshots), binary files.
    Later tools read each kind; nothing is opened for writing."""
    if not paths:
        raise ToolError("no files to read", "pass log files, folders or - for stdin")
    files, gaps = _walk(paths)
    kinds: dict[str, list[str]] = {}
    for path in files:
        kinds.setdefault(sniff(path), []).append(str(path))
    empty = kinds.get("empty", [])
    if empty:  # torchrun leaves an empty stderr.log per quiet rank: one line says it
        more = f" and {len(empty) - 1} more" if len(empty) > 1 else ""
        gaps.append(Gap(source=empty[0], reason=f"empty file{more}", tool="collect_files"))
    skipped = kinds.get("binary", []) + kinds.get("unreadable", [])
    if skipped:
        gaps.append(
            Gap(
                source=skipped[0],
                reason=f"{len(skipped)} binary or unreadable files skipped",
                tool="collect_files",
            )
        )
    if not files and not gaps:
        raise ToolError("the given folders hold no files")
    counts = Counter({k: len(v) for k, v in kinds.items()})
    text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no files"
    context: dict[str, Any] = {
        "log_files": kinds.get("log", []) + kinds.get("elastic_error", []),
        "pickle_files": kinds.get("pickle", []),
        "json_files": kinds.get("json", []),
        "snapshot_files": kinds.get("probe_snapshot", []),
    }
    return ToolOutput(gaps=gaps, context={k: v for k, v in context.items() if v}, text=text)


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
            results.append(_scan(Path(name)))
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


def _scan(path: Path) -> ScanResult:
    """Torchelastic error files are JSON holding a message and a traceback: read those as text."""
    if path.stat().st_size <= MAX_ERROR_FILE and path.suffix == ".json":
        try:
            payload = json.loads(path.read_text(errors="replace"))
        except (ValueError, UnicodeDecodeError):
            payload = None
        if isinstance(payload, dict) and isinstance(payload.get("message"), (dict, str)):
            return _scan_elastic_error(path, payload)
    return scan_file(path)


def _scan_elastic_error(path: Path, payload: dict[str, Any]) -> ScanResult:
    message = payload["message"]
    parts = (
        [message]
        if isinstance(message, str)
        else [
            str(message.get("message", "")),
            str(message.get("extraInfo", {}).get("py_callstack", "")),
        ]
    )
    with tempfile.TemporaryDirectory(prefix="triage-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text("\n".join(parts))
        return scan_file(copy, source=path)


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
    if out:
        rank = next((s.rank for s in result.signals if s.rank is not None), None)
        info = LogFile(
            path=result.path,
            size=result.size,
            rank=rank,
            lines=result.lines,
            truncated_hits=result.dropped,
        )
        out.append(
            Evidence(
                id=unique(f"file:{name}"),
                kind=LogFile.EVIDENCE_KIND,
                source=result.path,
                rank=rank,
                summary=f"{result.lines} lines, {len(result.signals)} signature lines",
                data=info.model_dump(exclude_defaults=True),
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
    state = _dump_state(record)
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


def _dump_state(record: TracebackRecord) -> RankState | None:
    """A dump of a main thread as a RankState; None for tracebacks and threading's threads.

    The dump's pid when it names one (py-spy's `Process N:`, NCCL prefixes), else a stable
    negative placeholder: -1 - rank, or derived from where the dump sits in its file.
    """
    if not record.dump or not record.frames:
        return None
    outermost = record.frames[-1]
    function = outermost.function.rsplit(".", 1)[-1]  # py-spy says `Thread._bootstrap`
    if outermost.file.endswith("threading.py") and function.startswith("_bootstrap"):
        return None
    if record.pid is not None:
        pid = record.pid
    elif record.rank is not None:
        pid = -1 - record.rank
    else:
        pid = -(1 << 20) - zlib.crc32(f"{record.path}:{record.line}".encode()) % (1 << 30)
    return classify(record.frames, pid=pid, rank=record.rank, host=record.host or "")
