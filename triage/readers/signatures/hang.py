"""Hangs seen in logs: watchdog timeouts, per-rank progress, collective fingerprints.

Every line here says where one rank stood when the job stopped: the collective it timed
out in (sequence number, op, sizes), how far it got (last enqueued / completed work,
NCCL opCount), or the fingerprint TORCH_DISTRIBUTED_DEBUG=DETAIL checks before each
collective. Rules compare these positions across ranks to find the rank that is not
where the others are. Formats cover torch 1.8 to 2.x (with and without SeqNum, NumelIn,
`[PG ...]` prefixes) and NCCL/RCCL COLL traces.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from triage.readers.signatures import Series, signature

# torch's ProcessGroupNCCL log prefix names the reporting rank and, since 2.3, its group:
# `[Rank 3]`, `[PG 0 Rank 3]`, `[PG 0 (default_pg) Rank 3]`, `[PG ID 0 PG GUID 0(default_pg) Rank 3]`.
_PG_RANK = re.compile(r"\[(?:PG (?:ID )?(?P<pg>\d+)[^\]]*?\s)?Rank (?P<rank>\d+)\]")
_FINGERPRINT = re.compile(
    r"SequenceNumber=(?P<seq>\d+)|OpType=(?P<op>\w+)|TensorShape=\[(?P<shape>[^\]]*)\]"
    r"|TensorDtypes=(?P<dtypes>\w+(?:, (?!TensorDeviceTypes)\w+)*)"
)


def _ints(fields: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: int(v) for k, v in fields.items() if k in names and v is not None}


def _reporter(found: re.Match[str]) -> dict[str, Any]:
    """The rank (and process group) from the `[PG .. Rank N]` prefix of the line."""
    prefix = _PG_RANK.search(found.string)
    if prefix is None:
        return {}
    out: dict[str, Any] = {"rank": int(prefix["rank"])}
    if prefix["pg"] is not None:
        out["pg"] = prefix["pg"]
    return out


def parse_fingerprint(text: str) -> dict[str, Any]:
    """`CollectiveFingerPrint(...)`'s body as seq, op, shape and dtypes (those present)."""
    out: dict[str, Any] = {}
    for part in _FINGERPRINT.finditer(text):
        key = part.lastgroup
        if key is not None and key not in out:
            out[key] = int(part[key]) if key == "seq" else part[key].strip()
    return out


def _watchdog(found: re.Match[str]) -> dict[str, Any]:
    fields = _reporter(found) | _ints(
        found.groupdict(), "seq", "numel_in", "numel_out", "timeout_ms", "ran_ms"
    )
    if found["shape"] is not None:
        fields["shape"] = found["shape"]
    return fields


signature(
    "hang.watchdog_timeout",
    r"(?:(?:Watchdog c|C)aught collective operation timeout: )?Work\w*\((?:SeqNum=(?P<seq>\d+), )?"
    r"OpType=(?P<op>\w+)(?:, TensorShape=\[(?P<shape>[^\]]*)\])?"
    r"(?:, NumelIn=(?P<numel_in>-?\d+), NumelOut=(?P<numel_out>-?\d+))?"
    r"(?:, Timeout\(ms\)=(?P<timeout_ms>\d+))?\)"
    r"(?: ran for (?P<ran_ms>\d+) milliseconds before timing out)?",
    # A pasted log often wraps before `WorkNCCL(`: the second half still names the work.
    # TORCH_NCCL_BLOCKING_WAIT's own: `Work WorkNCCL(SeqNum=42, ...) timed out in blocking wait.`
    anchors=(
        "collective operation timeout: Work",
        "milliseconds before timing out",
        "timed out in blocking wait",
    ),
    summary="the process-group watchdog timed out a collective on this rank (op, sequence number, sizes)",
    extract=_watchdog,
)


def _progress(found: re.Match[str]) -> dict[str, Any]:
    fields = _reporter(found) | _ints(found.groupdict(), "seq", "last_enqueued", "last_completed")
    source = re.search(r"collective timeout from\s+(?:rank (\d+)|(this local rank))", found.string)
    if source and source.group(1):
        fields["timeout_from"] = int(source.group(1))
    elif source:
        fields["timed_out"] = True
    return fields


signature(
    "hang.watchdog_progress",
    r"(?:at (?:NCCL )?work(?: sequence id)?: (?P<seq>-?\d+),? (?:PG status: )?)?"
    r"[Ll]ast enqueued (?:NCCL )?work: (?P<last_enqueued>-?\d+), "
    r"last completed (?:NCCL )?work: (?P<last_completed>-?\d+)",
    anchors=("enqueued NCCL work: ", "last enqueued work: "),
    summary="how far this rank's process group got: the work that failed, the last enqueued and completed",
    extract=_progress,
)

signature(
    "hang.dump_signal_observed",
    r"Observed flight recorder dump signal from another rank",
    anchors="Observed flight recorder dump signal from another rank",
    summary="another rank's watchdog timed out and asked this rank to dump; this one had not timed out",
    extract=_reporter,
)


def _rank_list(found: re.Match[str]) -> dict[str, Any]:
    return {"ranks": [int(r) for r in re.findall(r"\d+", found["ranks"])]}


# ProcessGroupNCCL's desync report (TORCH_NCCL_DESYNC_DEBUG=1, TraceUtils.h): from the
# store's per-rank traces, the ranks that never started a collective, and those that
# finished collective #N but did not join #N+1 while the reporter waits in it.
signature(
    "hang.desync_never_joined",
    r"ranks \[(?P<ranks>[\d, ]+)\] are the lagging ranks that caused this timeout",
    anchors="are the lagging ranks that caused this timeout",
    summary="PyTorch's desync report: these ranks never joined any collective",
    extract=_rank_list,
)

signature(
    "hang.desync_lagging",
    r"\[(?P<ranks>[\d, ]+)\] finished collective #(?P<seq>\d+), but didn't join collective"
    r" #(?P<next>\d+)",
    anchors="but didn't join collective #",
    summary="PyTorch's desync report: these ranks finished one collective and never joined the next",
    extract=lambda found: _rank_list(found) | {"seq": int(found["seq"])},
)

signature(
    "hang.watchdog_teardown",
    # torch_npu's ProcessGroupHCCL words it alike
    r"Some [NH]CCL operations have failed or timed out",
    anchors=(
        "Some NCCL operations have failed or timed out",
        "Some HCCL operations have failed or timed out",
    ),
    summary="the NCCL watchdog takes the process down after a failed or timed-out collective",
    extract=_reporter,
)


def _stuck(found: re.Match[str]) -> dict[str, Any]:
    return _reporter(found) | _ints(found.groupdict(), "pending", "stuck_s")


signature(
    "hang.watchdog_stuck",
    r"Heartbeat monitor timed out!.*?(?:workMetaList_\.size\(\)\s*=\s*(?P<pending>\d+))?$"
    r"|watchdog got stuck for (?P<stuck_s>\d+) seconds"
    # torch >= 2.6's monitor thread, as it ends the process; and its check of the GIL
    r"|due to ProcessGroupNCCL watchdog hang|possible GIL induced hang",
    anchors=(
        "Heartbeat monitor timed out",
        "watchdog got stuck for",
        "due to ProcessGroupNCCL watchdog hang",
        "possible GIL induced hang",
    ),
    summary="the watchdog thread itself stopped (a CUDA/NCCL call or the GIL blocks the process)",
    extract=_stuck,
)

signature(
    "hang.exit_without_destroy",
    r"destroy_process_group\(\) was not called before program exit",
    anchors="destroy_process_group() was not called before program exit",
    summary="this rank's process reached Python's exit with its process group still alive",
)

# torch.distributed.rpc: a remote call that outlived its timeout (60 s by default). Older
# releases said `RPC ran for more than 60000 milliseconds and timed out`, newer ones `RPC ran
# for more than set timeout (60000 ms) and will now be marked with an error`.
signature(
    "hang.rpc_timeout",
    r"RPC ran for more than (?:set timeout \((?P<ms>\d+) ms\)|(?P<ms_old>\d+) milliseconds)",
    anchors="RPC ran for more than",
    summary="a torch.distributed.rpc call ran past its timeout: the callee is slow or stuck",
)

signature(
    "hang.watchdog_exception",
    r"Exception raised from (?P<where>checkTimeout|ncclCommWatchdog|watchdogHandler) at "
    r"(?P<file>\S*ProcessGroup\w*\.cpp):(?P<src_line>\d+)",
    anchors=(
        "Exception raised from checkTimeout",
        "Exception raised from ncclCommWatchdog",
        "Exception raised from watchdogHandler",
    ),
    summary="the C++ exception of the process-group watchdog (a timeout or a communicator error)",
)


def _running(found: re.Match[str]) -> dict[str, Any]:
    # Groups: 1 rank, 2 the DETAIL barrier's error, 3 the fingerprint's body.
    fields = parse_fingerprint(found.group(3))
    fields["stage"] = "barrier_error" if found.group(2) else "running"
    if found["rank"] is not None:
        fields["rank"] = int(found["rank"])
    return fields


signature(
    "hang.fingerprint",
    r"(?:\[Rank (?P<rank>\d+)\] )?(?:Running collective|(Monitored Barrier "
    r"encountered error running collective)): CollectiveFingerPrint\((.*?)\)"
    r"(?:\. Error:|\s*$)",
    anchors=("Running collective: CollectiveFingerPrint(", "error running collective: "),
    summary="TORCH_DISTRIBUTED_DEBUG=DETAIL: the collective this rank entered (sequence number, op, shapes)",
    extract=_running,
)


def _partial(own: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether the peer's fingerprint was rebuilt from the length check alone.

    DETAIL first all-gathers the fingerprints' lengths; when they differ, the peer's
    "fingerprint" is that length read as an OpType (no tensors, SequenceNumber=0), so it
    says the peer differs, not how. Without tensors or a sequence number (torch < 1.13)
    the two cannot be told apart and the peer's op is not trusted either.
    """
    if "shape" in other:
        return False
    if "seq" in other:
        return other["seq"] == 0 and own.get("seq") not in (None, 0)
    return True


_PEER_PART = re.compile(r", but Rank (?P<peer>\d+) is running collective: CollectiveFingerPrint\(")
_ASPECTS = re.compile(r"Collectives differ in the following aspects: ?(?P<aspects>.*)$")


def _mismatch(found: re.Match[str]) -> dict[str, Any]:
    """Fingerprints hold nested parentheses (`TensorOptions(dtype=float (default), ...)`),
    so the rest of the line is split at the peer's part and the aspects, not matched whole."""
    rest = found.group(2)
    if rest is None:  # the fingerprints went to the next lines of a wrapped paste
        return {"rank": int(found["rank"]), "cut": True}
    aspects = _ASPECTS.search(rest)
    if aspects:
        rest = rest[: aspects.start()]
    peer = _PEER_PART.search(rest)
    own = parse_fingerprint(rest[: peer.start()] if peer else rest)
    fields: dict[str, Any] = own | {"rank": int(found["rank"])}
    if peer is not None:
        other = parse_fingerprint(rest[peer.end() :])
        fields["peer"] = int(peer["peer"])
        fields |= {f"peer_{k}": v for k, v in other.items()}
        fields["peer_partial"] = _partial(own, other)
    if aspects and aspects["aspects"].strip():
        fields["aspects"] = aspects["aspects"].strip()
    return fields


signature(
    "hang.fingerprint_mismatch",
    r"Detected mismatch between collectives on ranks\. Rank (?P<rank>\d+) is running "
    r"(?:inconsistent )?collective:(?: CollectiveFingerPrint\((.*)|\s*)$",
    anchors="Detected mismatch between collectives on ranks",
    summary="TORCH_DISTRIBUTED_DEBUG=DETAIL found ranks entering different collectives (op, sequence or shapes)",
    extract=_mismatch,
)


def _barrier(found: re.Match[str]) -> dict[str, Any]:
    fields = _reporter(found)
    # Only rank 0 coordinates monitoredBarrier: a report without a prefix is rank 0's.
    fields.setdefault("rank", 0)
    fields["failed_ranks"] = [int(r) for r in re.findall(r"\d+", found["failed"] or "")]
    fields["timeout_ms"] = int(found["timeout_ms"] or found["after_ms"])
    return fields


# The ranks that never arrived; or, when rank 0's own time ran out while it still waited,
# `Rank 0 timed out in monitoredBarrier after 30000 ms.` (the ranks it had processed follow).
signature(
    "hang.monitored_barrier",
    r"Ranks? (?P<failed>\d+(?:, ?\d+)*) failed to pass monitoredBarrier in (?P<timeout_ms>\d+) ms"
    r"|Rank \d+ timed out in monitoredBarrier after (?P<after_ms>\d+) ms",
    anchors=("failed to pass monitoredBarrier", "timed out in monitoredBarrier"),
    summary="monitoredBarrier (or DETAIL's check before a collective) names the ranks that never arrived",
    extract=_barrier,
)

signature(
    "hang.monitored_barrier_peer",
    r"Rank (?P<rank>\d+) successfully reached monitoredBarrier, but received errors while "
    r"waiting for send/recv from rank (?P<from_rank>\d+)",
    anchors="successfully reached monitoredBarrier",
    summary="this rank reached monitoredBarrier; rank 0, which coordinates it, failed or gave up",
    peer_symptom=True,
    extract=lambda found: _ints(found.groupdict(), "rank", "from_rank"),
)

# gloo's unbound buffers (send/recv and the collectives built on them) and, in older gloo
# and its pairs' own deadlines, `Read timeout [10.0.0.2]:45123` / `Write timeout ...`; the
# pairs then close with `Application timeout caused pair closure`.
signature(
    "hang.gloo_timeout",
    r"Timed out waiting (?P<timeout_ms>\d+)ms for (?P<direction>recv/send|recv|send) operation to"
    r" complete"
    r"|gloo\S*\]? (?P<pair_direction>Read|Write) timeout \[?(?P<peer>[^\]\s]+)\]?:\d+"
    r"|Application timeout caused pair closure",
    anchors=("Timed out waiting ", "Read timeout", "Write timeout", "Application timeout caused"),
    summary="a gloo collective or send/recv timed out waiting for a peer",
    extract=lambda found: (
        _ints(found.groupdict(), "timeout_ms")
        | ({"direction": found["pair_direction"].lower()} if found["pair_direction"] else {})
    ),
)


def _coll(found: re.Match[str]) -> dict[str, Any]:
    fields = _ints(found.groupdict(), "count", "datatype", "root", "nranks", "rank")
    fields["opcount"] = int(found["opcount"], 16)
    return fields


signature(
    "hang.nccl_coll",
    r"NCCL INFO (?P<coll>[A-Za-z]+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
    r"count (?P<count>\d+) datatype (?P<datatype>\d+) op \d+ root (?P<root>-?\d+) "
    r"comm (?P<comm>\S+)(?: commHash \S+)? \[nranks=(?P<nranks>\d+)\]"
    r"(?: stream \S+)?(?: task \d+ globalrank (?P<rank>\d+))?",
    anchors=": opCount ",
    summary="NCCL_DEBUG_SUBSYS=COLL: a collective this rank enqueued, with its per-communicator opCount",
    extract=_coll,
    # One line per collective: a COLL log is millions of them. Each communicator is a
    # series whose last line says how far its rank got.
    series=Series(
        line=r"NCCL INFO [A-Za-z]+: opCount ", key="comm", token="comm {} ", progress="opcount"
    ),
)


# A rank's own progress print around a collective, as people add them to find a hang:
# `Rank 7 tensor before allreduce: torch.Size([32768000])`, `[rank 2] entering barrier`,
# `Before barrier for rank 6`. The rank comes from the line or its `[rankN]:` prefix.
_COLLECTIVE = (
    r"(?:all_?reduce|all_?gather(?:_object|_into_tensor)?|reduce_?scatter(?:_tensor)?|"
    r"broadcast(?:_object_list)?|(?:monitored_)?barrier|all_?to_?all(?:_single)?)"
)
_ENTERING = r"(?:before|entering|calling|waiting (?:at|for|in|on)|start(?:ing)?)"
_LEAVING = r"(?:after|leaving|exiting|passed|done with|finished|returned from)"
_PRINT_RANK = re.compile(r"(?i)\brank[\s:=#_-]*(?P<rank>\d+)\b")
_PRINT_SHAPE = re.compile(
    r"torch\.Size\(\[(?P<shape>[\d, ]*)\]\)|\bshape[=: ]+\(?\[?(?P<dims>\d+(?:, ?\d+)*)"
)


def _progress_print(found: re.Match[str]) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "op": found["coll"].lower().replace("_", ""),
        "entering": found["entering"] is not None,
    }
    rank = _PRINT_RANK.search(found.string)
    if rank is not None:
        fields["rank"] = int(rank["rank"])
    shape = _PRINT_SHAPE.search(found.string)
    if shape is not None:
        fields["shape"] = (shape["shape"] or shape["dims"]).replace(" ", "")
    return fields


signature(
    "hang.progress_print",
    rf"(?i)\b(?:(?P<entering>{_ENTERING})|{_LEAVING})\b(?:\W+\w+){{0,3}}?\W+(?P<coll>{_COLLECTIVE})\b",
    anchors=tuple(
        variant
        for word in ("reduce", "gather", "scatter", "broadcast", "barrier", "to_all", "toall")
        for variant in (word, word.capitalize(), word.upper())
    ),
    summary="a rank's own print before or after a collective (where the user traced it)",
    extract=_progress_print,
)


# A native stack (gdb's `thread apply all bt`, py-spy --native) stopped in c10d's or
# gloo's wait, in NCCL's communicator setup or group end, in an NCCL collective's enqueue or
# a CUDA synchronize: the process is inside a collective. Only
# frame lines count (`#5 0x... in SYM (...) from lib.so`, `SYM (lib.so)`), not NCCL's INFO
# lines that name ncclCommInitRank.
signature(
    "hang.native_wait",
    r"^\s*(?:#\d+\s+(?:0x[0-9a-fA-F]+ in )?)?"
    r"(?P<frame>c10d::[\w:<>]*?::(?:wait|synchronize\w*|barrier|doWait|waitForWork)|"
    r"gloo::[\w:]*::(?:wait\w*|recv)|ncclCommInitRank\w*|ncclGroupEnd|"
    r"nccl(?:AllReduce|AllGather|Broadcast|ReduceScatter|Send|Recv)|"
    r"cuda(?:Stream|Device|Event)Synchronize)\b"
    r"(?=.*(?:\bfrom \S+\.so|\(\S+\.so[\d.]*\)|\bat \S+:\d+))",
    anchors=(
        "c10d::",
        "gloo::",
        "ncclCommInitRank",
        "ncclGroupEnd",
        "ncclAllReduce",
        "ncclAllGather",
        "ncclBroadcast",
        "ncclReduceScatter",
        "ncclSend",
        "ncclRecv",
        "StreamSynchronize",
        "DeviceSynchronize",
        "EventSynchronize",
    ),
    summary="a native stack frame waiting inside a collective or NCCL's setup",
)


signature(
    "hang.unique_id_timeout",
    r"\[(?P<rank>\d+)\] is setting up NCCL communicator and retrieving ncclUniqueId from "
    r"\[(?P<root>\d+)\] via c10d key-value store by key '(?P<entry>[^']*)',? but "
    r"store->get\('[^']*'\) got error: (?P<error>.+)",
    anchors="retrieving ncclUniqueId from",
    summary="a rank waited for the NCCL unique ID that the group's root rank never published",
    extract=lambda found: {"rank": int(found["rank"]), "root": int(found["root"])},
)

# Horovod's stall inspector (horovod/common/stall_inspector.cc): a tensor submitted by some
# ranks only, for longer than HOROVOD_STALL_CHECK_TIME_SECONDS; `Missing ranks:` follows.
signature(
    "hang.horovod_stall",
    r"(?:One or more tensors were submitted to be reduced, gathered or broadcasted by subset "
    r"of ranks and are waiting for remainder of ranks for more than (?P<seconds>\d+) seconds)",
    anchors="submitted to be reduced, gathered or broadcasted by subset of ranks",
    summary="Horovod: some ranks submitted a collective the others have not",
)

# Horovod's coordinator (horovod/common/controller.cc) compares what every rank submitted
# under one tensor name and fails the op when they differ: `Mismatched ALLREDUCE tensor
# shapes: One rank sent a tensor of shape [10], but another rank sent a tensor of shape [11].`,
# `Mismatched data types: ...`, `Mismatched operations: One rank did an ALLREDUCE, but another
# rank did an BROADCAST.` (older: `Mismatched MPI operations`), root ranks, scale factors,
# CPU/GPU device selection. It does not say which rank is the odd one.
#: What Horovod (or torch's DETAIL check) compares that makes it a size mismatch; the rest
#: (the op, its root, its scale factors, its device) is the ranks calling different collectives.
SIZE_MISMATCHES = frozenset({"tensor shapes", "data types"})


def compared(what: str) -> Callable[[re.Match[str]], dict[str, Any]]:
    """The fields of a check of the ranks' collectives that words one thing it compared:
    that thing, and the check's own words."""
    return lambda found: {"what": what, "detail": found.group(0)}


#: Who compared the ranks' collectives, by signature: (the checker, what it compared, how
#: sure its words are: NCCL's only says a wait "may be caused by" a mismatch).
MISMATCH_CHECKERS = {
    "hang.horovod_mismatch": ("Horovod's coordinator", "what every rank submitted under one"
                              " tensor name", 0.7),
    "hang.wrapper_mismatch": ("TORCH_DISTRIBUTED_DEBUG=DETAIL's check", "every rank's"
                              " collective at one step", 0.7),
    "zero.lists_disagree": ("DeepSpeed ZeRO's check", "the ranks' parameter lists", 0.7),
    "nccl.collective_mismatch_hint": ("NCCL's own check (2.4-2.7)", "the ranks' collective"
                                      " calls", 0.5),
    "nccl.collective_mismatch_asserted": ("NCCL's device-side check (2.4-2.7)", "the ranks'"
                                          " collective calls", 0.65),
    "fsdp.forward_order": ("FSDP's check (TORCH_DISTRIBUTED_DEBUG=DETAIL)", "the order the ranks"
                           " all-gather their parameters in", 0.7),
    "fsdp.forward_order_changed": ("FSDP's warning", "this iteration's forward order with the"
                                   " first's", 0.4),
    "dtensor.ranks_disagree": ("DTensor's (or the pipeline stage's) check", "the ranks' local"
                               " tensors", 0.65),
}  # fmt: skip

signature(
    "hang.horovod_mismatch",
    r"Mismatched (?:(?P<op>[A-Za-z]+) )?(?P<what>tensor shapes|data types|operations|root ranks"
    r"|reduction operation|prescale and/or postscale factors|CPU/GPU device selection):"
    r" (?P<detail>One [^\n]{0,200})",
    anchors=(
        "tensor shapes: One rank",
        "data types: One rank",
        "operations: One rank",
        "root ranks: One rank",
        "reduction operation: One rank",
        "postscale factors: One rank",
        "device selection: One rank",
    ),
    summary="Horovod: the ranks submitted one tensor with different shapes, types or ops",
)

# TORCH_DISTRIBUTED_DEBUG=DETAIL's first wording (torch 1.9-1.10, ProcessGroupWrapper, before
# the fingerprints): `Mismatch between collective operation types across ranks.This likely
# indicates an application bug`, `Error when verifying shape tensors for collective ALLREDUCE on
# rank 0. This likely indicates that input shapes into the collective are mismatched across
# ranks.` The rank is the reporter, not the odd one.
signature(
    "hang.wrapper_mismatch",
    r"Mismatch between collective (?P<what>operation types) across ranks"
    r"|Error when verifying shape tensors for collective (?P<op>\w+) on rank \d+",
    anchors=("Mismatch between collective operation types", "Error when verifying shape tensors"),
    summary="TORCH_DISTRIBUTED_DEBUG=DETAIL: the ranks' collectives differ in op or shapes",
    extract=lambda found: {
        "what": "operations" if found["what"] else "tensor shapes",
        "detail": found.group(0),
    },
)

# DeepSpeed ZeRO compares the ranks' parameter lists before its collectives: `Detected a
# disagreement on list length between rank0 and rank3: \n rank0: 112 \n rank3: 110` (a model
# built differently on some ranks, parameters created under a rank condition); before
# 0.16, and ZeRO-3's trace of the modules each rank ran, `disagreement between rank0 and
# rank6: rank0: [ids...], rank6: [ids...]` (a forward that took other modules on some ranks).
signature(
    "zero.lists_disagree",
    r"Detected a disagreement on list (?:length|contents) between rank\d+ and rank\d+|"
    r"\bdisagreement between rank0 and rank\d+: rank0:(?:\s|$)",
    anchors=("Detected a disagreement on list", "disagreement between rank0 and rank"),
    summary="DeepSpeed ZeRO found the ranks' parameter lists different",
    extract=compared("parameter lists"),
)

# NCCL 2.4-2.7 (init.cc) saying a wait looks like ranks in different collectives: `Your
# program may be hanging, this may be caused by a collective mismatch around rank 3`.
signature(
    "nccl.collective_mismatch_hint",
    r"Your program may be hanging, this may be caused by a collective mismatch around rank \d+",
    anchors="may be caused by a collective mismatch",
    summary="NCCL suspects the ranks called different collectives",
    extract=compared("calls"),
)

# ... and its kernels' assertion that they met a different collective (ncclDevAssertedMismatch):
# `Mismatched collective detected, please check your collective calls at and around rank 39`.
signature(
    "nccl.collective_mismatch_asserted",
    r"Mismatched collective detected, please check your collective calls at and around rank \d+",
    anchors="Mismatched collective detected",
    summary="NCCL's kernels found the ranks in different collectives",
    extract=compared("calls"),
)

# DDP's Join with throw_on_early_termination=True: a rank ran out of inputs and every rank
# raises (`Rank 0 exhausted all inputs.` on the one that did).
signature(
    "hang.join_exhausted",
    r"Detected at least one rank that exhausted inputs|Rank (?P<rank>\d+) exhausted all inputs",
    anchors=("rank that exhausted inputs", "exhausted all inputs"),
    summary="DDP's Join: a rank ran out of inputs before the others (uneven inputs)",
)

# transformers' and accelerate's main_process_first(): every other rank waits in a barrier
# while the main process runs the block alone (dataset.map tokenization, downloads,
# caching); a block longer than the process group's timeout times the waiting ranks out.
# A traceback's frame in it, or the `with` line that entered it.
signature(
    "hang.main_process_first",
    r"\bin (?P<frame>(?:local_)?main_process_first)\s*$"
    r"|\bwith\b.*\b(?P<call>(?:local_)?main_process_first)\(",
    anchors="main_process_first",
    summary="a stack inside main_process_first's barrier (the main process runs the block alone)",
)
