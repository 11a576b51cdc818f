"""Reading a rank's Python stack: which op it blocks in, and which user line got it there.

Works on frames from any source (py-spy dumps today, Flight Recorder frames and
tracebacks later), so the classification lives in the engine, not in a tool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage.models import Evidence
from triage.observations import Frame, RankActivity, RankState
from triage.readers.source import source_line
from triage.text import bound_text

COLLECTIVE_OPS = frozenset(
    {
        "all_reduce", "all_reduce_coalesced", "all_reduce_multigpu", "broadcast",
        "broadcast_object_list", "barrier", "monitored_barrier", "all_gather",
        "all_gather_into_tensor", "_all_gather_base", "all_gather_object",
        "all_gather_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor",
        "_reduce_scatter_base", "all_to_all", "all_to_all_single", "gather",
        "gather_object", "scatter", "scatter_object_list",
    }
)  # fmt: skip
P2P_OPS = frozenset(
    {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
     "recv_object_list", "P2POp"}
)  # fmt: skip
GROUP_SETUP_OPS = frozenset(
    {
        "init_process_group", "new_group", "new_subgroups", "new_subgroups_by_enumeration",
        "split_group", "init_device_mesh", "DeviceMesh.__init__", "_store_based_barrier",
        "_new_process_group_helper", "rendezvous", "_create_c10d_store",
        "_init_process_groups", "_get_or_create_default_group",
    }
)  # fmt: skip
EXIT_OPS = frozenset({"destroy_process_group", "_exit_function", "_run_exitfuncs", "shutdown"})

_TORCH = re.compile(r"(^|/)(torch|torchgen|functorch)/")
_SITE = re.compile(r"/(site|dist)-packages/")
# a package's console script (bin/torchrun, bin/deepspeed, bin/accelerate): a launcher's
# entry point in the launcher's own traceback, not the user's code
_CONSOLE_SCRIPT = re.compile(r"/bin/[^/.]+$")
_STDLIB = re.compile(r"(/lib/python3\.\d+/|^<frozen |^<string>$)")
_DIST = re.compile(r"(^|/)torch/distributed/")
_DATA = re.compile(r"(^|/)torch/utils/data/|(^|/)multiprocessing/(queues|connection)\.py$")
_IO = re.compile(r"(^|/)torch/serialization\.py$|(^|/)(shutil|tempfile|pickle)\.py$")
_LOCKS = re.compile(r"(^|/)(threading|queue|concurrent/futures/_base)\.py$")
_FUNCOL = re.compile(r"(^|/)torch/distributed/_functional_collectives\.py$")
_FUTURES = re.compile(r"(^|/)torch/futures/")
_WAIT_CALL = re.compile(r"\.wait\(\s*(?:timeout\s*=\s*[^)]*)?\)")
_P2P_CALL = re.compile(r"\b(irecv|isend)\(")
_DEBUGGER = re.compile(r"(^|/)(pdb|bdb|debugpy/|pydevd)")
_BACKWARD = frozenset({"_engine_run_backward", "backward"})


def is_torch(path: str) -> bool:
    return bool(_TORCH.search(path))


def is_stdlib(path: str) -> bool:
    return bool(_STDLIB.search(path)) and not _SITE.search(path)


def is_user_code(path: str) -> bool:
    """User code: neither torch, the standard library, an installed package nor its console
    script."""
    return not (
        is_torch(path) or is_stdlib(path) or _SITE.search(path) or _CONSOLE_SCRIPT.search(path)
    )


def user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost Python frame of user code in a snapshot stack (C++ frames skipped)."""
    return next((f for f in frames if f.file.endswith(".py") and is_user_code(f.file)), None)


def _op_name(frame: Frame) -> str:
    """`_exception_logger.<locals>.wrapper` wraps c10d ops; the bare name is what matters."""
    return frame.function.rsplit(".", 1)[-1] if "." in frame.function else frame.function


def frames_from_py_spy(thread: dict[str, Any]) -> list[Frame]:
    """py-spy's JSON frames (innermost first) as our Frames, keeping scalar locals only."""
    frames = []
    for raw in thread.get("frames") or []:
        local_reprs = {
            str(var.get("name")): str(var.get("repr"))[:120]
            for var in raw.get("locals") or []
            if var.get("arg") and var.get("repr") is not None
        }
        frames.append(
            Frame(
                function=str(raw.get("name", "?")),
                file=str(raw.get("filename", "?")),
                line=raw.get("line"),
                locals=local_reprs,
            )
        )
    return frames


def pick_main_thread(threads: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The thread that tells the rank's story: one in a distributed op, else MainThread."""
    if not threads:
        return None
    for thread in threads:
        frames = thread.get("frames") or []
        if any(_DIST.search(str(f.get("filename", ""))) for f in frames) and _is_user_driven(
            thread
        ):
            return thread
    for thread in threads:
        if thread.get("thread_name") == "MainThread":
            return thread
    return threads[0]


def gil_holder(
    threads: Sequence[dict[str, Any]], main: dict[str, Any] | None
) -> tuple[str, Frame] | None:
    """Another thread that holds the GIL in user code, and its innermost user frame.

    A C call that keeps the GIL (a ctypes.PyDLL call, an extension that never releases it)
    freezes every other thread of the process: the main thread then sits in whatever it
    was doing, and the line that matters is the holder's.
    """
    for thread in threads:
        if thread is main or not thread.get("owns_gil"):
            continue
        user = next((f for f in frames_from_py_spy(thread) if is_user_code(f.file)), None)
        if user is not None:
            return str(thread.get("thread_name") or thread.get("thread_id") or "?"), user
    return None


def _is_user_driven(thread: dict[str, Any]) -> bool:
    """Background torch threads (watchdogs, pin-memory) have no user frames."""
    return any(is_user_code(str(f.get("filename", ""))) for f in thread.get("frames") or [])


def _int_local(frame: Frame, *names: str) -> int | None:
    for name in names:
        value = frame.locals.get(name)
        if value is not None and re.fullmatch(r"-?\d+", value):
            return int(value)
    return None


def _int_list_local(frame: Frame, name: str) -> list[int] | None:
    value = frame.locals.get(name, "")
    if not re.fullmatch(r"\[[\d,\s]*\]", value):
        return None
    return [int(v) for v in re.findall(r"\d+", value)]


def _group_of(frame: Frame) -> str | None:
    """'default' when the call passed no group; a resolved ProcessGroup object is opaque."""
    value = frame.locals.get("group", frame.locals.get("pg"))
    if value in ("None", "GroupMember.WORLD"):
        return "default"
    return None


def classify(
    frames: Sequence[Frame],
    *,
    pid: int,
    rank: int | None,
    host: str = "",
    active: bool | None = None,
    thread: str = "",
) -> RankState:
    """Name what the rank is doing from its innermost frames outwards."""
    user_frames = [f for f in frames if is_user_code(f.file)]
    non_torch = [f for f in frames if not is_torch(f.file) and not is_stdlib(f.file)]
    chosen = user_frames or non_torch
    user_frame = chosen[0] if chosen else None
    state = RankState(
        rank=rank,
        pid=pid,
        host=host,
        activity=RankActivity.unknown,
        user_frame=user_frame,
        call_path=list(reversed(user_frames or non_torch)),
        frames=list(frames[:64]),
        thread=thread,
    )
    if not frames:
        state.detail = "no Python frames"
        return state
    found = _find_activity(frames, active)
    state.activity, state.op, state.detail, op_frame = found
    if op_frame is not None:
        state.group = _group_of(op_frame)
        if state.activity is RankActivity.p2p:
            state.peer = _int_local(op_frame, "dst", "src", "group_dst", "group_src", "peer")
        if state.activity is RankActivity.group_setup:
            state.group_ranks = _int_list_local(op_frame, "ranks")
    return state


def _functional_wait(
    frames: Sequence[Frame],
) -> tuple[RankActivity, str | None, str, Frame | None] | None:
    """A rank waiting on a functional collective: DTensor's `full_tensor()` and
    `redistribute()`, funcol's all_gather_tensor, a tensor parallel layer's comms. The
    wait runs through torch's op dispatch (torch/_ops.py), so the innermost frame is not in
    torch.distributed; the outermost torch.distributed frame is the call the user made."""
    if not any(_FUNCOL.search(f.file) for f in frames):
        return None
    outer = next(f for f in reversed(frames) if _DIST.search(f.file))
    return RankActivity.collective, _op_name(outer), f"waiting in {outer.function}", outer


def _find_activity(
    frames: Sequence[Frame], active: bool | None
) -> tuple[RankActivity, str | None, str, Frame | None]:
    # The outermost c10d API frame is the op the user called (all_gather_object calls
    # all_gather inside); scan from the user side inwards.
    outermost_first = list(reversed(frames))
    for frame in outermost_first:
        if not _DIST.search(frame.file):
            continue
        name = _op_name(frame)
        if name in GROUP_SETUP_OPS:
            return RankActivity.group_setup, name, f"in {frame.function}", frame
        if name in P2P_OPS:
            return RankActivity.p2p, name, f"in {frame.function}", frame
        if name in COLLECTIVE_OPS:
            return RankActivity.collective, name, f"in {frame.function}", frame
        if name in EXIT_OPS:
            return RankActivity.exiting, name, f"in {frame.function}", frame
    innermost = frames[0]
    if _DIST.search(innermost.file):
        return RankActivity.collective, _op_name(innermost), f"inside {innermost.file}", innermost
    functional = _functional_wait(frames)
    if functional is not None:
        return functional
    waited = _async_wait(frames) if active is not True else None
    if waited is not None:
        return waited
    if _op_name(innermost) in _BACKWARD and is_torch(innermost.file) and active is False:
        return (
            RankActivity.collective,
            "backward",
            "idle in autograd backward: gradient all-reduce hooks (DDP/FSDP) wait here",
            innermost,
        )
    for frame in frames:
        if _DEBUGGER.search(frame.file):
            return RankActivity.debugger, None, f"in debugger ({frame.function})", frame
        if _op_name(frame) in EXIT_OPS:
            return RankActivity.exiting, _op_name(frame), f"in {frame.function}", frame
    if any(_DATA.search(f.file) for f in frames):
        return RankActivity.data_loading, None, "in data loading", None
    if _IO.search(innermost.file):
        return RankActivity.io, None, f"in {innermost.function}", None
    if _LOCKS.search(innermost.file):
        return RankActivity.lock, None, f"waiting in {innermost.function}", None
    if active is False:
        return RankActivity.idle, None, "idle outside any collective (sleep, I/O or input)", None
    return RankActivity.compute, None, "running outside any collective", None


def _async_wait(
    frames: Sequence[Frame],
) -> tuple[RankActivity, str | None, str, Frame | None] | None:
    """A rank blocked in `work.wait()` of a collective issued with async_op=True (or a
    `torch.futures` wait): the C++ wait leaves no torch.distributed frame, only the user's
    line, so the line's text says it waits on peers."""
    frame = frames[1] if _FUTURES.search(frames[0].file) and len(frames) > 1 else frames[0]
    if not is_user_code(frame.file) or frame.line is None:
        return None
    text = source_line(frame.file, frame.line) or ""
    if not _WAIT_CALL.search(text):
        return None
    p2p = _P2P_CALL.search(text)
    if p2p:
        detail = f"waits on its {p2p.group(1)}() request (`{text[:80]}`)"
        return RankActivity.p2p, p2p.group(1), detail, frame
    detail = f"waits on an async collective's work (`{text[:80]}`)"
    return RankActivity.collective, "wait", detail, frame


@dataclass
class StackNode:
    """A node of the stack-prefix tree: ranks that share every frame down to here."""

    frame: tuple[str, str, int | None] | None
    ranks: set[int] = field(default_factory=set)
    children: dict[tuple[str, str, int | None], StackNode] = field(default_factory=dict)


def build_stack_tree(states: Iterable[RankState]) -> StackNode:
    """Merge ranks' stacks from the outermost frame in, the way STAT-like tools do."""
    root = StackNode(frame=None)
    for state in states:
        if state.rank is None:
            continue
        node = root
        node.ranks.add(state.rank)
        for frame in reversed(state.frames):
            key = frame.key()
            node = node.children.setdefault(key, StackNode(frame=key))
            node.ranks.add(state.rank)
    return root


def _is_wrapper(key: tuple[str, str, int | None]) -> bool:
    """c10d's logging decorator sits on every collective; it says nothing."""
    return key[1].endswith("c10d_logger.py")


def _label(key: tuple[str, str, int | None]) -> str:
    function, file, line = key
    short = "/".join(file.split("/")[-2:]) if is_torch(file) else file.rsplit("/", 1)[-1]
    return f"{function} ({short}:{line})"


def render_stack_tree(
    root: StackNode, ranks_label: Callable[[set[int]], str], limit: int = 40
) -> list[str]:
    """The merged stacks as indented lines: one line per run of frames shared by a rank set."""
    lines: list[str] = []

    def walk(node: StackNode, depth: int) -> None:
        for child in sorted(node.children.values(), key=lambda n: (-len(n.ranks), min(n.ranks))):
            chain, cursor = [child], child
            while len(cursor.children) == 1:
                (only,) = cursor.children.values()
                if only.ranks != cursor.ranks:
                    break
                chain.append(only)
                cursor = only
            shown = [
                _label(n.frame) for n in chain if n.frame is not None and not _is_wrapper(n.frame)
            ]
            if len(shown) > 4:
                shown = [shown[0], f"... {len(shown) - 3} frames ...", *shown[-2:]]
            if len(lines) < limit:
                lines.append(f"{'  ' * depth}[{ranks_label(cursor.ranks)}] " + " > ".join(shown))
            walk(cursor, depth + 1)

    walk(root, 0)
    return lines


def stack_evidence(state: RankState, source: str, taken_by: str = "", tag: str = "") -> Evidence:
    """A rank's classified stack as `stack` evidence: what the hang rules and grouping read,
    whoever took it (py-spy, or triage.probe on the signal)."""
    who = f"rank{state.rank}" if state.rank is not None else f"pid{state.pid}"
    where = f" at {state.user_frame.location()}" if state.user_frame else ""
    by = f" ({taken_by})" if taken_by else ""
    lines = [f"Thread {state.thread or '?'} of pid {state.pid} (rank {state.rank}):"]
    lines += [f"  {frame.function} ({frame.file}:{frame.line})" for frame in state.frames]
    return Evidence(
        id=f"stack:{who}{tag}",
        kind=RankState.EVIDENCE_KIND,
        source=source,
        rank=state.rank,
        summary=f"{who.replace('rank', 'rank ')}{by}: {state.describe()}{where}",
        data=state.model_dump(mode="json"),
        excerpt=bound_text("\n".join(lines), 3000),
    )
