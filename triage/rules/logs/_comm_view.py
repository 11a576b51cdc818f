"""What the comm rules share: log signals by name, the hosts a job spans, the failure that
came first (origins) versus the ranks that only report a lost peer (witnesses), and
whether an NCCL log simply stops during communicator setup."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from triage.models import Evidence, Finding, Location
from triage.observations import LogFile, LogSignal, TracebackRecord
from triage.readers.signatures.c10d import ABORT_PEER_REASON
from triage.registry import EvidenceSet
from triage.rules.logs._signals import (
    TEARDOWN_EXCEPTIONS,
    Found,
    Signal,
    ids,
    is_fact,
    ranks_of,
    signals,
    strongest,
    tracebacks,
)

P = TypeVar("P", LogSignal, TracebackRecord)
Traceback = tuple[Evidence, TracebackRecord]

#: Signatures that name a specific comm cause; comm.unknown stays quiet when one is present.
SPECIFIC = frozenset(
    {
        "nccl.shm_failed",
        "shm.no_space",
        "shm.torch_file",
        "shm.dataloader_bus_error",
        "shm.ray_request",
        "nccl.no_interface",
        "nccl.no_net_plugin",
        "nccl.socket_family",
        "nccl.connect_failed",
        "gloo.no_address",
        "gloo.loopback_fallback",
        "gloo.pair_connect",
        "gloo.connect_failed",
        "nccl.ib_verbs_failed",
        "nccl.ib_completion_error",
        "nccl.ib_async_event",
        "nccl.ofi_error",
        "ib.memlock",
        "ccl.local_coord_missing",
        "ccl.no_provider",
        "nccl.p2p_failed",
        "driver.insufficient",
        "driver.too_old",
        "nccl.undefined_symbol",
        "nccl.plugin_version_missing",
        "nccl.topology_unmodelled",
        "ray.version_mismatch",
        "nccl.message_truncated",
        "nccl.net_size_mismatch",
        "c10d.bind_failed",
        "c10d.listen_failed",
        "c10d.address_in_use",
        "c10d.client_timeout",
        "c10d.store_connect",
        "c10d.connect_failed",
        "c10d.name_resolution",
        "c10d.rendezvous_timeout",
        "c10d.rendezvous_connection",
        "c10d.clients_timeout",
        "c10d.store_error",
    }
)

#: NCCL warnings printed on healthy jobs (optional plugins, libraries NCCL probes for).
_BENIGN_WARN = re.compile(
    r"libibverbs|libnccl-net|NET/Plugin|[Nn]o plugin found|Could not find:? \S*lib|"
    r"libmlx5|libgdrapi|gdrcopy|is deprecated|iommu=pt"
)

#: Text of an error that reports a lost peer rather than the rank's own failure.
PEER_TEXT = re.compile(
    r"Connection closed by (?:remote )?peer|Connection reset by peer|ncclRemoteError|"
    r"Socket (?:unexpectedly )?closed \[|Connection was likely closed|"
    r"NCCL communicator was aborted(?: on rank \d+)?\.?(?!.*(?:[Tt]imeout|timed out))"
    r"(?!.*Original reason for failure was:(?!.*" + ABORT_PEER_REASON + r"))|"
    r"remote process exited or there was a network error|[Bb]roken pipe|got 0 bytes|"
    r"remote worker crashing|RendezvousClosedError|unexpected exit of a remote peer|"
    r"Horovod has been shut down|received errors while waiting for send/recv from rank"
)

#: Text of a timeout: a symptom of a stall or a missing peer, whose cause lies elsewhere.
TIMEOUT_TEXT = re.compile(r"[Tt]imed out|[Tt]imeout")

#: A collective that never completed (the watchdog's or gloo's timeout), as opposed to a
#: rendezvous or store timeout.
COLLECTIVE_TIMEOUT = re.compile(
    r"collective operation timeout|Timeout\(ms\)=|Timed out waiting \d+ms for (?:recv|send)|"
    r"milliseconds before timing out|operations have failed or timed out|detected by watchdog"
)

#: Signatures of a rank that timed out waiting in a collective.
_WAITED = ("hang.watchdog_timeout", "hang.gloo_timeout")

#: NCCL's bootstrap, in the file of an error trace's line (`bootstrap.cc:270 -> 2`).
BOOTSTRAP_FILE = re.compile(r"(^|/)bootstrap\.cc$")

#: Reports of a process that crashed or exited, which say nothing of why.
_NAMELESS = ("process.", "scheduler.", "cuda.call_failed", "mpi.rank_ended")
_COMM_FAMILIES = ("nccl.", "gloo.", "c10d.", "net.", "shm.", "ib.", "driver.", "ccl.")
_COMM_TEXT = re.compile(
    r"NCCL|nccl|gloo|Gloo|DistBackendError|DistNetworkError|DistStoreError|ProcessGroup|"
    r"collective|Watchdog|Rendezvous|TCPStore|[Cc]onnection"
)

#: Python's own socket errors: a peer symptom only when torch.distributed raised them.
_BUILTIN_CONNECTION_ERRORS = (
    "ConnectionResetError",
    "ConnectionAbortedError",
    "ConnectionRefusedError",
    "BrokenPipeError",
    "ConnectionError",
)
_DIST_FRAME = re.compile(r"(^|/)torch/distributed/")
_NCCL_ERROR = re.compile(r"NCCL error|NCCL Error|DistBackendError|nccl\w+Error")

#: Exceptions the launcher or a signal handler raises while tearing a job down.
_TEARDOWN = re.compile("|".join(sorted(TEARDOWN_EXCEPTIONS)))

#: Signals by which a person or the launcher stops a job (Ctrl-C, scancel, cleanup).
_STOP = frozenset({"SIGINT", "SIGTERM", "SIGHUP"})

#: Signals that kill a rank on its own account (not the launcher's SIGTERM cleanup, not the
#: SIGABRT that NCCL's watchdog raises in ranks that lost a peer).
FATAL_SIGNALS = frozenset({"SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})


@dataclass
class Origin:
    """A rank's own failure: the traceback or exit that no peer caused."""

    rank: int | None
    what: str
    evidence: list[str]
    traceback: TracebackRecord | None = None
    first: bool = False
    #: Known only because a peer's NCCL named it: its own error is not in the text.
    named_by_peer: bool = False

    @property
    def location(self) -> Location | None:
        frame = self.traceback.user_frame if self.traceback else None
        return frame.location() if frame else None


@dataclass
class CommView:
    by_name: dict[str, list[Signal]]
    tracebacks: list[Traceback]
    hosts: set[str]
    nnodes: int | None
    origins: list[Origin]
    witnesses: dict[int | None, list[str]] = field(default_factory=dict)
    #: Witnesses known only from the launcher stopping them (SIGTERM): they logged nothing.
    stopped: set[int | None] = field(default_factory=set)

    def of(self, *names: str) -> list[Signal]:
        return [item for name in names for item in self.by_name.get(name, [])]

    def has(self, *names: str) -> bool:
        return any(self.by_name.get(name) for name in names)

    def named_elsewhere(self) -> bool:
        """A specific comm signature, or a failure of another family, explains the text (a
        crash or exit report names no cause: NCCL's own failure lines beside it still speak)."""
        return any(self.by_name.get(name) for name in SPECIFIC) or any(
            not s.signature.startswith(_NAMELESS) for _, s in self.other_failures()
        )

    def unnamed(self, *kinds: str) -> list[Signal]:
        """NCCL result codes of these kinds ("system", "internal") when no line names the
        call that failed: no specific signature, no lost peer, no failure of another family.
        The comm rules then rank their usual suspects low, beside comm.unknown."""
        if self.named_elsewhere():
            return []
        if any(s.peer_symptom for items in self.by_name.values() for _, s in items):
            return []
        return [(e, s) for e, s in self.of("nccl.error") if s.fields.get("kind") in kinds]

    @property
    def multi_host(self) -> bool | None:
        """True/False when the logs tell, None when they do not name hosts."""
        if (self.nnodes or 0) > 1 or len(self.hosts) > 1:
            return True
        if self.nnodes == 1 or len(self.hosts) == 1:
            return False
        return None

    def warnings(self) -> list[Signal]:
        """NCCL WARN lines that report a failure (benign probes left out)."""
        return [
            (e, s)
            for e, s in self.of("nccl.warn")
            if not _BENIGN_WARN.search(str(s.fields.get("message", "")))
        ]

    def override_lines(self) -> list[Signal]:
        """NCCL's lines that say an NCCL_* variable is in force: its echo of the environment,
        and a topology file it loaded (NCCL_TOPO_FILE)."""
        return self.of("nccl.env_override", "nccl.topology_file")

    def overrides(self) -> dict[str, str]:
        """NCCL_* variables in force, as NCCL's lines say."""
        return {
            str(s.fields["variable"]): str(s.fields.get("value", ""))
            for _, s in self.override_lines()
        }

    def failure_signals(self) -> list[Signal]:
        """Every signal that is not an NCCL fact or a benign warning."""
        benign = {id(s) for _, s in self.of("nccl.warn")} - {id(s) for _, s in self.warnings()}
        return [
            (e, s)
            for name, items in self.by_name.items()
            if not is_fact(name)
            for e, s in items
            if id(s) not in benign and not s.fields.get("noise")
        ]

    def other_failures(self) -> list[Signal]:
        """Failure signals of other families (config, memory, DDP, ...), launcher reports and
        generic markers (which name no cause) aside."""
        return [
            (e, s)
            for e, s in self.failure_signals()
            if not s.signature.startswith((*_COMM_FAMILIES, "elastic.", "generic."))
        ]

    def comm_failures(self) -> list[Signal | Traceback]:
        """Failure signals of the comm families and tracebacks from communication calls."""
        out: list[Signal | Traceback] = [
            (e, s) for e, s in self.failure_signals() if s.signature.startswith(_COMM_FAMILIES)
        ]
        out += [(e, t) for e, t in self.errors() if _COMM_TEXT.search(f"{t.exception} {t.message}")]
        return out

    def uses_ib(self) -> bool:
        return self.has("nccl.ib_devices") or any(
            str(s.fields.get("network", "")).startswith("IB") for _, s in self.of("nccl.network")
        )

    def errors(self) -> list[Traceback]:
        return [(e, t) for e, t in self.tracebacks if not t.dump]

    def stalled_in_setup(self) -> bool:
        """An NCCL_DEBUG=INFO log that stops while communicators are set up: NCCL lines,
        no `Init COMPLETE`, no error, no traceback (a Ctrl-C of the stuck job aside)."""
        if not self.has("nccl.init", "nccl.version", "nccl.network", "nccl.channel_p2p"):
            return False
        if any(s.fields.get("stage") == "COMPLETE" for _, s in self.of("nccl.init")):
            return False
        return self.silent()

    def closed_in_setup(self) -> list[Signal]:
        """NCCL's `Connection closed by remote peer` where no peer can have died of its own:
        no rank's own failure, and the failed call traced back through the bootstrap, or a
        job of one rank (its sockets run to its own proxy and bootstrap threads)."""
        closed = self.of("nccl.socket_closed")
        if not closed or self.origins:
            return []
        booting = any(
            BOOTSTRAP_FILE.search(str(s.fields["file"])) for _, s in self.of("nccl.error_trace")
        )
        tested = {s.fields.get("test_rank") for _, s in self.of("nccl.tests_rank")}
        sizes = {s.fields.get("nranks") for _, s in self.of("nccl.init")}
        alone = (tested == {0} and sizes <= {1}) or (sizes == {1} and tested <= {0})
        return closed if booting or alone else []

    def tests_stalled(self) -> bool:
        """nccl-tests named its ranks and measured no size, with no error: its first
        collective never returned (or the paste stops there)."""
        return self.has("nccl.tests_rank") and not self.has("nccl.tests_result") and self.silent()

    def silent(self, *, allow_timeouts: bool = False) -> bool:
        """No failure line and no traceback but the teardown of a stuck job (and collective
        timeouts when `allow_timeouts`)."""
        for _, s in self.failure_signals():
            stopped = s.signature.startswith("elastic.") and s.fields.get("signal") in _STOP
            timeout = allow_timeouts and COLLECTIVE_TIMEOUT.search(s.text)
            if not (stopped or timeout):
                return False
        for _, t in self.errors():
            timeout = allow_timeouts and COLLECTIVE_TIMEOUT.search(t.message)
            if not (_TEARDOWN.search(f"{t.exception} {t.message}") or timeout):
                return False
        return True

    def location(
        self, ranks: Iterable[int | None], text: re.Pattern[str] | None = None
    ) -> Location | None:
        """The user line of a traceback on one of `ranks` (matching `text` when given)."""
        wanted = set(ranks)
        candidates = [
            t
            for _, t in self.errors()
            if t.user_frame is not None and (t.rank in wanted or not wanted)
        ]
        if text is not None:
            matching = [t for t in candidates if text.search(f"{t.exception} {t.message}")]
            candidates = matching or candidates
        return (
            candidates[0].user_frame.location() if candidates and candidates[0].user_frame else None
        )

    def traceback_ids(self, ranks: Iterable[int | None], text: re.Pattern[str]) -> list[str]:
        wanted = set(ranks)
        return [
            e.id
            for e, t in self.errors()
            if (t.rank in wanted or not wanted) and text.search(f"{t.exception} {t.message}")
        ][:3]


def comm_view(evidence: EvidenceSet) -> CommView:
    return evidence.derived("comm_view", lambda: _build(evidence))


def _build(evidence: EvidenceSet) -> CommView:
    by_name: dict[str, list[Signal]] = {}
    for item in signals(evidence):
        by_name.setdefault(item[1].signature, []).append(item)
    tbs = tracebacks(evidence)
    # NCCL prefixes carry the short hostname, torchelastic's report the FQDN: compare the
    # short names, and trust the report only when no NCCL line names a host.
    hosts = {_short(s.host) for items in by_name.values() for _, s in items if s.host}
    hosts |= {_short(str(s.fields["host"])) for _, s in by_name.get("nccl.tests_rank", [])}
    hosts = hosts or {
        _short(str(s.fields["host"]))
        for _, s in by_name.get("elastic.child_failed", [])
        if s.fields.get("host")
    }
    nnodes = max(
        (int(s.fields["nnodes"]) for _, s in by_name.get("nccl.comm_topology", [])), default=None
    )
    if (nnodes or 0) <= 1 and len(hosts) <= 1:
        by_name = {name: [(e, _local(s)) for e, s in items] for name, items in by_name.items()}
        tbs = [(e, _local(t)) for e, t in tbs]
    peer_ranks = {
        s.rank
        for items in by_name.values()
        for _, s in items
        if s.peer_symptom and s.rank is not None
    }
    origins = _origins(by_name, tbs, peer_ranks)
    origin_ranks = {o.rank for o in origins}
    witnesses: dict[int | None, list[str]] = {}
    for items in by_name.values():
        for e, s in items:
            if s.peer_symptom and s.rank not in origin_ranks:
                witnesses.setdefault(s.rank, []).append(e.id)
    for e, t in tbs:
        if not t.dump and t.rank not in origin_ranks and _lost_peer(t, peer_ranks):
            witnesses.setdefault(t.rank, []).append(e.id)
    stopped: set[int | None] = set()
    if origins:  # the launcher stopped the others (SIGTERM) before they saw the peer go
        for e, s in by_name.get("elastic.child_failed", []):
            if s.rank not in origin_ranks and s.fields.get("signal") in _STOP:
                if s.rank not in witnesses:
                    stopped.add(s.rank)
                witnesses.setdefault(s.rank, []).append(e.id)
    return CommView(by_name, tbs, hosts, nnodes, origins, witnesses, stopped)


def _short(host: str) -> str:
    """`node1.cluster.local` -> `node1`; addresses stay whole."""
    return host if host.replace(".", "").isdigit() else host.split(".", 1)[0]


def _local(item: P) -> P:
    """On one host a local rank is the global rank: `[default3]:` lines name rank 3."""
    if item.rank is None and item.local_rank is not None:
        return item.model_copy(update={"rank": item.local_rank})
    return item


def _lost_peer(t: TracebackRecord, peer_ranks: set[int]) -> bool:
    """Whether a traceback reports a lost peer: its text says so (from torch.distributed, not a
    plain socket in user code), or it is an NCCL error on a rank whose NCCL log lost a peer."""
    text = f"{t.exception or ''}: {t.message}"
    if PEER_TEXT.search(text):
        builtin = (t.exception or "").endswith(_BUILTIN_CONNECTION_ERRORS)
        return not builtin or any(_DIST_FRAME.search(f.file) for f in t.frames)
    return t.rank in peer_ranks and bool(_NCCL_ERROR.search(text))


def _origins(
    by_name: dict[str, list[Signal]], tbs: list[Traceback], peer_ranks: set[int]
) -> list[Origin]:
    """Each rank's own failures: first-observed launcher reports, tracebacks that are not
    a lost peer, a timeout or the teardown, and exits by a fatal signal. A rank that reports
    a lost peer exited because of it, whatever order the launcher saw the exits in."""
    lost = peer_ranks | {t.rank for _, t in tbs if not t.dump and _lost_peer(t, peer_ranks)}
    # A rank whose own error is a collective timeout waited for another: its exit (first or
    # not, SIGABRT from NCCL's watchdog or exit code 1) is a symptom.
    lost |= {
        t.rank
        for _, t in tbs
        if not t.dump and COLLECTIVE_TIMEOUT.search(f"{t.exception}: {t.message}")
    }
    lost |= {s.rank for name in _WAITED for _, s in by_name.get(name, []) if s.rank is not None}
    exits = [
        (e, s)
        for name in ("elastic.child_failed", "elastic.worker_failed", "elastic.process_signal")
        for e, s in by_name.get(name, [])
        if s.rank is None or s.rank not in lost
    ]
    found: list[Origin] = []
    for e, s in exits:
        signal = s.fields.get("signal")
        if s.signature == "elastic.child_failed" and (
            s.fields.get("first") or signal in FATAL_SIGNALS
        ):
            what = f"exit code {s.fields.get('exitcode')}" + (f" ({signal})" if signal else "")
            found.append(Origin(s.rank, what, [e.id], first=bool(s.fields.get("first"))))
        elif s.signature == "elastic.worker_failed":
            code = s.fields.get("exitcode")
            if signal in FATAL_SIGNALS or (isinstance(code, int) and code > 0):
                found.append(Origin(s.rank, f"exit code {code}", [e.id]))
        elif s.signature == "elastic.process_signal" and signal in FATAL_SIGNALS:
            found.append(Origin(s.rank, f"killed by {signal}", [e.id]))
    for e, s in by_name.get("scheduler.first_exit", []):
        if s.rank is not None and s.rank not in lost:
            found.append(
                Origin(s.rank, "the first process to exit with an error", [e.id], first=True)
            )
    for e, s in by_name.get("nccl.remote_error_from", []):
        named = s.fields["from_rank"]
        if named not in lost:
            who = f"rank {s.rank}'s" if s.rank is not None else "a peer's"
            what = (
                f"named by {who} process group as the rank that aborted its communicators first"
                if s.fields.get("how") == "aborted"
                else f"named by {who} NCCL as the source of a remote error"
            )
            found.append(Origin(named, what, [e.id], named_by_peer=True))
    for e, t in tbs:
        if t.dump or not (t.exception or t.message):
            continue
        text = f"{t.exception or ''}: {t.message}"
        if _lost_peer(t, peer_ranks) or TIMEOUT_TEXT.search(text) or _TEARDOWN.search(text):
            continue
        found.append(Origin(t.rank, text.strip(": "), [e.id], traceback=t))
    return _merge(found)


def _merge(found: list[Origin]) -> list[Origin]:
    """One origin per rank: its traceback (for the line of code) joined with its exit."""
    merged: dict[int | None, Origin] = {}
    for origin in found:
        kept = merged.get(origin.rank)
        if kept is None:
            merged[origin.rank] = origin
            continue
        kept.evidence += origin.evidence
        kept.first = kept.first or origin.first
        if kept.traceback is None and origin.traceback is not None:
            kept.traceback, kept.what = origin.traceback, origin.what
    return sorted(merged.values(), key=lambda o: (not o.first, o.traceback is None, o.rank or 0))


def quote(items: list[Signal], limit: int = 160) -> str:
    """The first line of a set of signals, cut for a summary."""
    if not items:
        return ""
    text = items[0][1].text
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted_finding(
    evidence: EvidenceSet,
    found: list[Found],
    about: re.Pattern[str],
    confirm: str,
    ranks: list[int] | None = None,
) -> Finding:
    """The strongest explanation as a finding that quotes its first line: setup errors say
    what is wrong in their own words. `about` picks the traceback frame to point at."""
    (confidence, what, items, fix), every = strongest(found)
    ranks = ranks_of(s for _, s in items) if ranks is None else ranks
    return Finding(
        title=what,
        summary=f"{what}: `{items[0][1].text[:200]}`",
        ranks=ranks,
        location=comm_view(evidence).location(ranks, about),
        confidence=confidence,
        evidence=ids(every)[:12],
        fix=fix,
        confirm=confirm,
    )


#: What NCCL logs while it sets communicators up; a log whose last signature is one of them,
#: a few lines from its end, stopped at or before the first collective.
_SETUP = frozenset(
    {
        "nccl.init",
        "nccl.channel_p2p",
        "nccl.channel_shm",
        "nccl.channel_net",
        "nccl.comm_topology",
        "nccl.network",
        "nccl.version",
        "nccl.bootstrap_interface",
        "nccl.socket_interfaces",
        "nccl.ib_devices",
        "nccl.ib_absent",
        "nccl.env_override",
    }
)
#: Lines after the last setup line that still count as "right after" it (a progress bar,
#: a framework's banner); any number when the log ends in NCCL's own INFO lines.
_AFTER_SETUP = 20


def stopped_after_setup(evidence: EvidenceSet) -> list[Signal]:
    """The last line of each log that stops right after a completed NCCL communicator
    setup with nothing else to say (no error, no timeout, no collective after it)."""
    return _stopped(
        evidence,
        "stopped_after_setup",
        lambda found, last: (
            all(sig.signature in _SETUP for _, sig in found)
            and any(sig.fields.get("stage") == "COMPLETE" for _, sig in found)
        ),
    )


#: The last words of a process-group setup that has not finished.
_INIT_STEPS = frozenset({"setup.init_announced", "c10d.store_listening"})


def stopped_at_init(evidence: EvidenceSet) -> list[Signal]:
    """The last line of each log that stops right after a framework announced that it sets
    the process group up, with no word that every rank joined."""
    return _stopped(
        evidence,
        "stopped_at_init",
        lambda found, last: (
            last.signature in _INIT_STEPS
            and not any(sig.signature == "setup.init_completed" for _, sig in found)
        ),
    )


def stopped_in_nvls(evidence: EvidenceSet) -> list[Signal]:
    """The last line of each log whose last signal is a step of NCCL's NVLS setup: NVLS
    multicast waits for the NVSwitch fabric (fabric manager, IMEX in a container) instead
    of failing when it is not usable. The fabric rule names it, and the P2P rule yields to
    it."""
    return _stopped(
        evidence, "stopped_in_nvls", lambda found, last: last.signature == "fabric.nvls_setup"
    )


def _stopped(
    evidence: EvidenceSet,
    key: str,
    stalled: Callable[[list[Signal], LogSignal], bool],
) -> list[Signal]:
    """The last signal of each log whose signals (and last signal) `stalled` accepts, when
    the log ends a few lines after it. Computed once per evidence set under `key`: several
    rules ask for the same stop."""
    return evidence.derived(key, lambda: _stopped_now(evidence, stalled))


def _stopped_now(
    evidence: EvidenceSet, stalled: Callable[[list[Signal], LogSignal], bool]
) -> list[Signal]:
    by_path: dict[str, list[Signal]] = {}
    for item in signals(evidence):
        by_path.setdefault(item[1].path, []).append(item)
    logs = {log.path: log for _, log in evidence.payloads(LogFile)}
    stopped = []
    for path, found in by_path.items():
        last = max(found, key=lambda item: item[1].line)
        log = logs.get(path)
        if log is None or not stalled(found, last[1]):
            continue
        if log.lines - last[1].line <= _AFTER_SETUP or _nccl_chatter(log.last_line):
            stopped.append(last)
    return stopped


def _nccl_chatter(line: str) -> bool:
    """NCCL's own INFO lines (proxy connections, tuner, timings) still going at the log's
    end: nothing of the program came after the setup; a service thread's closed connection
    is a teardown, not a stall."""
    return "NCCL INFO" in line and "Connection closed" not in line
