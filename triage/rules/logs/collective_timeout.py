"""hang.collective_timeout from logs: a collective timed out and the logs name no culprit yet."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from triage.models import Evidence, Finding
from triage.observations import LogSignal
from triage.registry import EvidenceSet, rule
from triage.rules.fr._stuck_groups import agreeing, coverage, stuck_groups
from triage.rules.logs._hang_lines import hang_log
from triage.rules.logs._signals import ids, signals
from triage.text import plural, rank_label

#: The watchdog's own words or frames, when the WorkNCCL details did not come with them.
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout|checkTimeout|ncclCommWatchdog"
    r"|Operation timed out!|NCCL Operation Timed Out"
)

_COLLECT = (
    "While it hangs, dump every rank's Python stack (`triage hang --launcher-pid PID`, or "
    "`py-spy dump --pid PID` per rank); next run, set TORCH_FR_BUFFER_SIZE=2000 for Flight "
    "Recorder dumps on timeout and TORCH_DISTRIBUTED_DEBUG=DETAIL to turn a mismatch into an "
    "error naming the ranks; keep every rank's log (torchrun --redirects 3 --tee 3)."
)
_BELOW = (
    "Look below Python: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET logs of every rank (the"
    " transport each channel uses, a WARN), the hosts' kernel logs (GPU Xid, link down), the"
    " GPUs' utilisation while it hangs (a kernel queued ahead of the collective that never ends"
    " keeps a GPU at 100%), and every rank's stack (`triage hang --launcher-pid PID`)."
)
_RPC = (
    "Find what the called worker was doing (its stack with py-spy, its log): a long first "
    "call (building a large model remotely, loading weights) needs a longer timeout "
    "(rpc.init_rpc(..., rpc_backend_options=TensorPipeRpcBackendOptions(rpc_timeout=...)) or "
    "the call's own timeout=), a stuck one a fix on that worker."
)


@rule("logs.collective_timeout", "hang.collective_timeout")
def collective_timeout(evidence: EvidenceSet) -> Iterator[Finding]:
    """A collective timed out; the logs say which one, but not which rank held it up.

    What it detects:
    NCCL watchdog timeouts (`Watchdog caught collective operation timeout: WorkNCCL(...)`,
    `Timeout at NCCL work: N`), gloo `Timed out waiting Nms for recv/send operation`,
    monitoredBarrier timeouts (or, from a rank that reached it, `received errors while waiting
    for send/recv from rank 0`: the ranks that never arrived are in rank 0's log), or,
    weakest, a watchdog whose heartbeat stopped, or the
    watchdog's words and frames alone (`checkTimeout`, `ncclCommWatchdog`) with no details;
    a torch.distributed.rpc call past its timeout (`RPC ran for more than ... ms`, 0.45).

    Why it happens:
    Some rank did not reach the collective in time: it is elsewhere (evaluation,
    checkpointing, data loading), in a different collective, dead, or the transport
    (network, NVLink, a GPU) stalled. The timeout itself is the symptom.

    Evidence:
    The watchdog line names the op, its sequence number, sizes and timeout; rules for
    specific causes read the same lines across ranks and win when ranks disagree.

    Fix:
    Gather what tells the causes apart: every rank's stack while hung, Flight Recorder
    dumps, TORCH_DISTRIBUTED_DEBUG=DETAIL, every rank's log. Raise the timeout
    (`init_process_group(timeout=...)`) only when one rank's work is legitimately long.

    Known false positives:
    None as a symptom; as a cause it is the fallback when no rank stands out.

    References:
    torch.distributed docs, "Debugging torch.distributed applications"; Flight Recorder.
    """
    view = hang_log(evidence)
    fix = _COLLECT
    title = "a collective timed out; the rank that held it up is not in the logs"
    stuck = signals(evidence, "hang.watchdog_stuck")
    aborted = [
        (e, s)
        for e, s in signals(evidence, "hang.watchdog_exception", "hang.watchdog_teardown")
        if s.fields.get("where", "checkTimeout") == "checkTimeout"
    ]
    if view.timeouts:
        found, confidence, what = view.timeouts, 0.5, _describe(view.timeouts)
    elif stuck:
        found, confidence = stuck, 0.4
        what = (
            f"the watchdog on {rank_label(_ranks(stuck))} stopped making progress: "
            "a CUDA or NCCL call (or a thread holding the GIL) blocks the process"
        )
    elif aborted:
        found, confidence = aborted, 0.35
        what = f"the NCCL watchdog took {rank_label(_ranks(aborted))} down after a timeout"
    elif peers := signals(evidence, "hang.monitored_barrier_peer"):
        found, confidence = peers, 0.35
        coordinator = peers[0][1].fields.get("from_rank", 0)
        what = (
            f"{rank_label(_ranks(peers)) or 'a rank'} reached monitored_barrier, but rank"
            f" {coordinator}, which coordinates it, reported a failure: rank {coordinator}'s log"
            " names the ranks that never arrived"
        )
    elif bare := [
        (e, s) for e, s in signals(evidence, "generic.collective_stall") if _WATCHDOG.search(s.text)
    ]:
        found, confidence = bare, 0.35
        who = f" on {rank_label(_ranks(bare))}" if _ranks(bare) else ""
        what = (
            f"the NCCL watchdog reports a collective timeout{who} (the line that would say "
            "which collective is cut or missing)"
        )
    elif rpc := signals(evidence, "hang.rpc_timeout"):
        found, confidence, fix = rpc, 0.45, _RPC
        title = "a remote call (torch.distributed.rpc) timed out"
        fields = rpc[0][1].fields
        after = fields.get("ms") or fields.get("ms_old")
        what = (
            f"a torch.distributed.rpc call ran past its timeout{f' of {after} ms' if after else ''}"
            ": the worker it called was slow (building or loading a large module) or stuck"
        )
    else:
        return
    timed_out = sorted(view.waiting)
    same = view.one_wait()
    quiet = view.silent()
    tail = ""
    if same and len(timed_out) > 1 and quiet:
        title = "a collective timed out; no log says why"
        tail = (
            f" {rank_label(quiet).capitalize()} logged no timeout: if it was in the same collective "
            "after all, the stall is below Python (network, NCCL, a GPU)."
        )
    elif same and len(timed_out) > 1:
        tail = (
            " Every rank that reports waits in the same collective: the stall is on a rank "
            "whose log is missing, or below Python (network, NCCL, a GPU)."
        )
    named = sorted({r for _, s in signals(evidence, *_DESYNC) for r in s.fields.get("ranks", [])})
    if named:  # the ranks the desync report names are in the logs, in its words
        title = f"a collective timed out; PyTorch's desync report names {rank_label(named)}"
        tail = ""
    inside = _every_member_inside(evidence)
    if inside:
        title, tail = "a collective timed out with every rank of its group inside it", inside
        fix = _BELOW
    yield Finding(
        title=title,
        summary=f"{what[0].upper()}{what[1:]}.{tail}",
        ranks=[],
        location=view.location(timed_out),
        confidence=confidence,
        evidence=ids(found[:8]),
        fix=fix,
        confirm=(
            "every rank's stack or Flight Recorder entry shows the same collective (a transport "
            "stall), not one rank elsewhere"
        ),
    )


_DESYNC = ("hang.desync_lagging", "hang.desync_never_joined")


def _ranks(found: list[tuple[Evidence, LogSignal]]) -> list[int]:
    return sorted({s.rank for _, s in found if s.rank is not None})


def _describe(found: list[tuple[Evidence, LogSignal]]) -> str:
    """'ranks 0-3 timed out in ALLREDUCE #1580 (NumelIn 466119168) after 600000 ms; ...'."""
    groups: dict[str, set[int]] = defaultdict(set)
    progress = "hang.watchdog_progress"  # the watchdog's second word on a timeout it named
    for _, sig in sorted(found, key=lambda item: item[1].signature == progress):
        rank = -1 if sig.rank is None else sig.rank
        if sig.signature != progress or not any(rank in ranks for ranks in groups.values()):
            groups[_what(sig)].add(rank)
    parts = []
    for what, ranks in list(groups.items())[:3]:
        known = sorted(r for r in ranks if r >= 0)
        who = rank_label(known) if known else "a rank"
        parts.append(f"{who} {what}")
    return "; ".join(parts)


def _what(sig: LogSignal) -> str:
    f = sig.fields
    if sig.signature == "hang.gloo_timeout":
        after = f" after {f['timeout_ms']} ms" if "timeout_ms" in f else ""
        return f"timed out{after} waiting for a gloo {f.get('direction', 'transfer')}"
    if sig.signature == "hang.monitored_barrier":
        failed = f.get("failed_ranks", [])
        missing = rank_label(failed) if failed else "ranks that never arrived"
        return f"waited {f.get('timeout_ms')} ms in monitoredBarrier for {missing}"
    if sig.signature == "hang.watchdog_progress":
        group = f", process group {f['pg']}" if "pg" in f else ""
        at = f" at work #{f['seq']}" if "seq" in f else ""
        return (
            f"timed out{at} (last enqueued #{f.get('last_enqueued')}, last completed "
            f"#{f.get('last_completed')}{group})"
        )
    op = f.get("op", "a collective")
    number = f" #{f['seq']}" if "seq" in f else ""
    numel = f" (NumelIn {f['numel_in']})" if "numel_in" in f else ""
    after = f" after {f['timeout_ms']} ms" if "timeout_ms" in f else ""
    return f"timed out in {op}{number}{numel}{after}"


def _every_member_inside(evidence: EvidenceSet) -> str:
    """Flight Recorder's word, when every member of the stuck group dumped and all wait in
    the same collective: then no rank held it up by being elsewhere, whatever the logs
    lack; the stall is below the calls."""
    for _, point in stuck_groups(evidence):
        normal = agreeing(point)
        if normal is None or coverage(point) < 1.0:  # a member without a readable dump
            continue
        return (
            f" Flight Recorder: every member of group {point.group}"
            f" ({plural(point.members, 'rank')}) dumped: {normal.describe()}, and none finished"
            " it, so no rank is missing or elsewhere: the stall is below the Python calls (the"
            " network or NCCL's transport, a GPU that stopped, or GPU work queued ahead of the"
            " collective on a rank's stream that never finished)."
        )
    return ""
