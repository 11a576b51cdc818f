"""Generic failure markers: lines that show a failure of one kind without naming its cause.

When no specific signature matches, these still tell which kind of failure the text shows
(a collective that timed out or mismatched, a communication library's error, memory
running out, a process killed), so a report says "a hang, cause not visible" with the next
step that would show it, instead of nothing at all.
"""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "generic.collective_stall",
    r"collective operation timeout|Detected mismatch between collectives|"
    r"Timeout\(ms\)=\d+|ncclCommWatchdog|checkTimeout|[Ss]tall(?:ed)? (?:[Ii]nspector|ranks?)|"
    r"missing ranks:",
    anchors=(
        "collective operation timeout",
        "Detected mismatch between collectives",
        "Timeout(ms)=",
        "ncclCommWatchdog",
        "checkTimeout",
        "tall inspector",
        "tall Inspector",
        "tall rank",
        "talled rank",
        "missing ranks:",
    ),
    summary="a collective timed out, stalled or mismatched across ranks (cause not named)",
)

signature(
    "generic.comm_failure",
    r"NCCL (?:failure|error)|nccl(?:Internal|System|UnhandledCuda|Remote)Error|"
    r"nccl(?:InvalidUsage|InvalidArgument)|unhandled (?:system|cuda) error|"
    r"internal error - please report this issue to the NCCL developers|"
    r"Connection (?:refused|reset by peer|closed by peer)|DistNetworkError|"
    r"RendezvousConnectionError|RendezvousTimeoutError|c10d::.*?Store",
    anchors=(
        "NCCL failure",
        "NCCL error",
        "ncclInternalError",
        "ncclSystemError",
        "ncclUnhandledCudaError",
        "ncclRemoteError",
        "ncclInvalidUsage",
        "ncclInvalidArgument",
        "unhandled system error",
        "unhandled cuda error",
        "internal error - please report",
        "Connection refused",
        "Connection reset by peer",
        "Connection closed by peer",
        "c10d::",
    ),
    summary="a communication library or the rendezvous failed (cause not named)",
)

signature(
    "generic.out_of_memory",
    r"[Oo]ut of memory|OutOfMemory|OUT_OF_MEMORY|oom-kill|"
    r"terminated with signal (?:Signals\.)?SIGKILL|exitcode\s*:\s*-9\b",
    anchors=(
        "ut of memory",
        "OutOfMemory",
        "OUT_OF_MEMORY",
        "oom-kill",
        "terminated with signal",
        "exitcode",
    ),
    summary="memory ran out, or a process was SIGKILLed as the OOM killer does (cause not named)",
)
