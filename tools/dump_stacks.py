"""Python stacks of live ranks, read with py-spy, all ranks at once.

py-spy pauses a process for a few milliseconds to read its stacks; it never changes
it. Ranks are dumped in parallel so 64 ranks take about as long as one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from triage.models import Evidence, Gap
from triage.observations import RankState
from triage.readers import pyspy
from triage.readers.stacks import (
    GROUP_SETUP_OPS,
    P2P_OPS,
    classify,
    frames_from_py_spy,
    pick_main_thread,
    stack_evidence,
)
from triage.registry import ToolError, ToolOutput, tool

INSTALL_HINT = "install py-spy (`pip install py-spy`, it ships the binary) or put it on PATH"
PTRACE_HINT = (
    "py-spy needs ptrace: run as root or the job's user, add CAP_SYS_PTRACE to the "
    "container (docker --cap-add SYS_PTRACE), or set kernel.yama.ptrace_scope=0"
)
MAX_WORKERS = 32


@dataclass
class Dump:
    pid: int
    threads: list[dict[str, object]] | None = None
    error: str | None = None
    hint: str | None = None


def find_py_spy() -> str:
    found = pyspy.binary()
    if not found:
        raise ToolError("py-spy is not installed", INSTALL_HINT)
    return found


def _explain(pid: int, stderr: str) -> tuple[str, str | None]:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line.removeprefix("Error:").strip() for line in lines if line.startswith("Error:")]
    last = (errors or lines or ["py-spy failed without a message"])[0]
    lowered = stderr.lower()
    if "permission denied" in lowered or "operation not permitted" in lowered:
        return f"pid {pid}: permission denied", PTRACE_HINT
    if (
        "no such process" in lowered
        or "failed to find process" in lowered
        or not os.path.exists(f"/proc/{pid}")
    ):
        return f"pid {pid}: process is gone", None
    if "python" in lowered and ("failed to find" in lowered or "not a python" in lowered):
        return f"pid {pid}: not a Python process (or its interpreter is unsupported)", None
    return f"pid {pid}: {last[:200]}", None


def dump_one(binary: str, pid: int, with_locals: bool, timeout_s: float) -> Dump:
    early = None if with_locals else pyspy.take_early(binary, pid)
    try:
        process = early or pyspy.start_dump(binary, pid, with_locals)
    except OSError as exc:
        return Dump(pid, error=f"pid {pid}: py-spy could not start: {exc}")
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return Dump(
            pid,
            error=f"pid {pid}: py-spy dump timed out after {timeout_s:g}s",
            hint="the process may be in uninterruptible sleep (D state); retry, or raise --timeout",
        )
    if process.returncode != 0:
        error, hint = _explain(pid, stderr)
        return Dump(pid, error=error, hint=hint)
    try:
        threads = json.loads(stdout)
    except json.JSONDecodeError:
        return Dump(pid, error=f"pid {pid}: py-spy printed no JSON")
    return Dump(pid, threads=threads if isinstance(threads, list) else [])


def _dump_all(binary: str, pids: list[int], with_locals: bool, timeout_s: float) -> list[Dump]:
    if not pids:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(pids))) as pool:
        return list(pool.map(lambda pid: dump_one(binary, pid, with_locals, timeout_s), pids))


def _needs_locals(dump: Dump, ranks_by_pid: dict[int, int]) -> bool:
    if dump.pid not in ranks_by_pid:
        return True
    main = pick_main_thread(dump.threads or [])
    names = {str(f.get("name", "")).rsplit(".", 1)[-1] for f in (main or {}).get("frames") or []}
    return bool(names & (P2P_OPS | GROUP_SETUP_OPS))


def _spawn_index(state: RankState) -> int | None:
    """mp.spawn passes the rank as `i` to torch.multiprocessing.spawn._wrap."""
    for frame in state.frames:
        if frame.function.endswith("_wrap") and "multiprocessing/spawn" in frame.file:
            value = frame.locals.get("i", "")
            return int(value) if value.isdigit() else None
    return None


@tool(name="dump_stacks")
def dump_stacks(
    pids: list[int],
    ranks_by_pid: dict[int, int] | None = None,
    with_locals: bool = True,
    timeout_s: float = 10.0,
) -> ToolOutput:
    """Dump every rank's Python stacks with py-spy, in parallel, and classify each rank:
    which collective or point-to-point op it blocks in, and at which user-code line.
    `with_locals` re-reads the ranks whose arguments matter (send/recv peers, unknown rank)."""
    binary = find_py_spy()
    ranks_by_pid = ranks_by_pid or {}
    host = socket.gethostname()
    dumps = _dump_all(binary, pids, False, timeout_s)
    if with_locals:
        # Locals cost a second read, so only ranks whose story needs them pay it:
        # point-to-point peers (src/dst) and mp.spawn ranks with no RANK in their env.
        again = [d.pid for d in dumps if d.threads is not None and _needs_locals(d, ranks_by_pid)]
        redone = {
            d.pid: d for d in _dump_all(binary, again, True, timeout_s) if d.threads is not None
        }
        dumps = [redone.get(d.pid, d) for d in dumps]
    evidence: list[Evidence] = []
    gaps: list[Gap] = []
    for dump in dumps:
        rank = ranks_by_pid.get(dump.pid)
        if dump.threads is None:
            gaps.append(
                Gap(
                    source=f"pid:{dump.pid}",
                    reason=dump.error or "no stack",
                    hint=dump.hint,
                    tool="dump_stacks",
                )
            )
            continue
        main = pick_main_thread(dump.threads)
        frames = frames_from_py_spy(main) if main else []
        active = bool(main.get("active")) if main else None
        state = classify(
            frames,
            pid=dump.pid,
            rank=rank,
            host=host,
            active=active,
            thread=str(main.get("thread_name") or "") if main else "",
        )
        if state.rank is None:
            state.rank = _spawn_index(state)
        evidence.append(stack_evidence(state, f"pid:{dump.pid}"))
    return ToolOutput(evidence=evidence, gaps=gaps)
