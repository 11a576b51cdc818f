"""comm.rendezvous from logs: the rendezvous store cannot be served or reached."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import CommView, comm_view, quote, stopped_at_init
from triage.rules.logs._signals import Found, Signal, ids, ranks_of, strongest
from triage.text import rank_label

_SETUP = re.compile(
    r"init_process_group|TCPStore|rendezvous|Rendezvous|DistNetworkError|DistStoreError|store"
)
#: A socket error of torch's store or rendezvous, not of user code (an HTTP client, a
#: metrics server) or of NCCL's own sockets.
_STORE_LINE = re.compile(
    r"c10d|TCPStore|socket\.cpp|DistNetworkError|DistStoreError|Rendezvous|EADDRINUSE|"
    r"launch distributed communication on port|"
    r"failed to (?:bind|listen)|^RuntimeError: (?:Address already in use|Connection refused|"
    r"Network is unreachable|No route to host)"
)
_DISTRIBUTED = re.compile(r"(^|/)torch/distributed/")
_PORT_FIX = (
    "Another process holds the port: a previous run still alive or a second job on the "
    "host. Stop it (`ss -ltnp | grep :PORT`), or give each job its own port (MASTER_PORT, "
    "`--rdzv-endpoint host:0` / `--standalone` picks a free one)."
)
_REACH_FIX = (
    "Make MASTER_ADDR/MASTER_PORT (or --rdzv-endpoint) point at the host that runs rank 0 / "
    "the store, reachable from every node: the same value on all nodes, a resolvable name or "
    "an IP on the data network, the port open in the firewall, and the store started "
    "(node 0 launched) before the others time out."
)
_MPI_FIX = (
    "Let the hosts reach each other on the ports MPI uses: open the firewall between them"
    " (or fix the ports it may use: --mca oob_tcp_dynamic_ipv4_ports / btl_tcp_port_min_v4),"
    " and name the interface every host can route with --mca oob_tcp_if_include and"
    " btl_tcp_if_include (e.g. eth0, not docker0 or lo)."
)
_CLOSED_FIX = (
    "Something on the host closed NCCL's bootstrap or proxy sockets while the ranks set up: a"
    " security or firewall agent that inspects local connections, a port scanner, or another"
    " process connecting to the bootstrap port (NCCL before 2.27.3 aborts when such a"
    " connection closes early). Check the hosts' security software and firewall rules for"
    " NCCL's ports, try NCCL_SOCKET_IFNAME on the interface the ranks share, and upgrade NCCL."
)
_HOROVOD_FIX = (
    "Check that every host reaches the launching host (ssh without a password, the ports"
    " horovodrun's services and its gloo rendezvous open: no firewall between the hosts), give"
    " --network-interface (HOROVOD_GLOO_IFACE) an interface every host has, and raise"
    " --start-timeout or HOROVOD_GLOO_TIMEOUT_SECONDS on a large or slow-starting job."
)
_HANDLER_FIX = (
    "Use an init_method this build serves: on Windows before torch 1.8 only file://"
    " (init_method='file:///C:/tmp/ddp_init', one path every rank reaches), or upgrade torch;"
    " check the scheme's spelling (env://, tcp://host:port, file://)."
)
_LIBUV_FIX = (
    "Use the store's classic backend: set USE_LIBUV=0 in the environment (torchrun and "
    "init_process_group read it), `use_libuv=0` in an env:// or tcp:// init_method's query, or "
    "TCPStore(..., use_libuv=False); or install a torch build with libuv."
)


@rule("logs.rendezvous", "comm.rendezvous")
def rendezvous(evidence: EvidenceSet) -> Iterator[Finding]:
    """The rendezvous/TCPStore port is taken, unreachable, unresolvable, or nodes never join.

    What it detects:
    The store's server socket failing to bind or listen (`Address already in use`,
    EADDRINUSE), clients timing out or being refused while connecting to (MASTER_ADDR,
    MASTER_PORT) (torch_xla's `Failed to connect to client mesh master: host:port` alike),
    hostnames that do not resolve (`Name or service not known`, gai errors),
    `Timed out after N seconds waiting for clients. X/Y clients joined`,
    RendezvousTimeoutError / RendezvousConnectionError, DistStoreError, a torch build
    without the store's default libuv backend (`use_libuv was requested but PyTorch was
    build without libuv support`: Windows wheels since torch 2.4), an init method the build
    has no handler for (`No rendezvous handler for env://`, 0.75: Windows before torch 1.8,
    which has file:// only); weaker (0.3), the
    TCPStore client's bare `Socket Timeout` or `Stop_waiting response is expected`; weaker
    still (0.2), a log that stops right after the process group's setup began (the store's
    server listening, a framework's announcement, torchelastic's agent joining its
    rendezvous, torch_xla waiting for its mesh master) with no word that every rank joined.
    NCCL's `Connection closed by remote peer` with no rank's own failure, traced back
    through bootstrap.cc or in a job of one rank (0.4): no peer died; something closed the
    setup's sockets.

    Why it happens:
    A second job (or a stale one) on the same host uses the default port 29500/29400;
    MASTER_ADDR names a host that is down, unresolvable from the workers, or the address of
    another interface; a firewall drops the port; some nodes were never launched or started
    after the rendezvous timeout.

    Evidence:
    The store/rendezvous lines with the host, port, errno and join counts.

    Fix:
    Port in use: stop the old job or choose another port (`--rdzv-endpoint host:0`,
    `--standalone`, a per-job MASTER_PORT). Unreachable: fix MASTER_ADDR/PORT on every node,
    DNS or /etc/hosts, the firewall; launch all nodes within the rendezvous timeout.

    Known false positives:
    When the rank hosting the store dies, clients see refused connections; with another
    rank's own failure visible those score low and comm.peer_failure leads. torch's warning
    `failed to connect to [localhost]:PORT (errno: 99 ...)` is IPv6 noise and is ignored. A
    name that does not resolve, or a host that cannot be routed to, with no line tying it
    to torch.distributed may be the job's own networking (a download): those score 0.3.

    References:
    torchrun docs (rendezvous, --rdzv-endpoint, --standalone); torch.distributed TCPStore.
    """
    view = comm_view(evidence)
    found = _findings(view)
    waiting = stopped_at_init(evidence)
    if waiting:
        what = "the log stops while the process group is set up: the other ranks never joined"
        found.append((0.2, what, waiting, _REACH_FIX))
    if not found:
        return
    (confidence, what, items, fix), every = strongest(found)
    ranks = ranks_of(s for _, s in items)
    who = f" ({rank_label(ranks)})" if ranks else ""
    yield Finding(
        title=what + who,
        summary=f"{what}: `{quote(items)}`.",
        ranks=ranks,
        location=view.location(ranks, _SETUP),
        confidence=confidence,
        evidence=ids(every)[:8] + view.traceback_ids(ranks, _SETUP),
        fix=fix,
        confirm=(
            "`ss -ltnp` on the store host shows the port held by another process"
            if fix is _PORT_FIX
            else "`nc -zv MASTER_ADDR MASTER_PORT` from a worker host fails"
        ),
    )


def _findings(view: CommView) -> list[Found]:
    found: list[Found] = []
    in_use = [
        (e, s)
        for e, s in view.of("c10d.bind_failed", "c10d.listen_failed", "c10d.address_in_use")
        # EADDRINUSE: 98 on Linux, WSAEADDRINUSE 10048 on Windows
        if (s.signature != "c10d.bind_failed" or s.fields.get("errno") in ("98", "10048"))
        and _STORE_LINE.search(s.text)
    ]
    if any(s.signature != "c10d.listen_failed" or s.fields for _, s in in_use):
        port = next((s.fields["port"] for _, s in in_use if s.fields.get("port")), None)
        on = f" {port}" if port else ""
        found.append((0.9, f"the rendezvous port{on} is already in use", in_use, _PORT_FIX))
    elif in_use:  # a bare "failed to listen" without the reason
        found.append((0.75, "the rendezvous store could not listen on its port", in_use, _PORT_FIX))
    unreached = view.of("c10d.client_timeout", "c10d.store_connect") + [
        (e, s)
        for e, s in view.of("c10d.connect_failed")
        if not s.fields.get("noise") and s.fields.get("errno") != "97"
    ]
    every_name = view.of("c10d.name_resolution")
    names = [
        (e, s)
        for e, s in every_name
        if s.fields.get("family") != "IPv6"
        and (_STORE_LINE.search(s.text) or _raised_by_distributed(view, s.text))
    ]
    if every_name and not names and not unreached and not _web(every_name):
        # no line ties the lookup to the rendezvous: MASTER_ADDR is the usual name, a
        # download or a logger's own host the other
        found.append((0.3, "a hostname does not resolve", every_name, _REACH_FIX))
    if names or (every_name and unreached):
        host = next((s.fields["host"] for _, s in every_name if s.fields.get("host")), None)
        what = (
            f"the rendezvous host {host} does not resolve"
            if host
            else "a hostname does not resolve"
        )
        found.append((0.85, what, names or every_name, _REACH_FIX))
    if unreached:
        host = next((s.fields["host"] for _, s in unreached if s.fields.get("host")), None)
        at = f" at {host}" if host else ""
        confidence = 0.55 if view.origins and not _own_failure(view, unreached) else 0.8
        found.append(
            (confidence, f"clients cannot reach the rendezvous store{at}", unreached, _REACH_FIX)
        )
    joined = view.of("c10d.clients_timeout")
    if joined:
        fields = joined[0][1].fields
        what = (
            f"only {fields.get('joined')}/{fields.get('expected')} clients reached the store "
            "before its timeout"
        )
        found.append((0.75, what, joined, _REACH_FIX))
    elastic = view.of("c10d.rendezvous_timeout", "c10d.rendezvous_connection")
    if elastic:
        name = (
            "timed out"
            if elastic[0][1].signature == "c10d.rendezvous_timeout"
            else "could not connect"
        )
        found.append((0.75, f"torchelastic's rendezvous {name}", elastic, _REACH_FIX))
    libuv = view.of("c10d.libuv_missing")
    if libuv:
        what = "the rendezvous store's libuv backend is missing from this torch build"
        found.append((0.85, what, libuv, _LIBUV_FIX))
    handler = view.of("c10d.no_handler")
    if handler:
        scheme = handler[0][1].fields.get("scheme") or "its"
        what = f"this torch build has no rendezvous handler for the {scheme}:// init method"
        found.append((0.75, what, handler, _HANDLER_FIX))
    store = view.of("c10d.store_error")
    if store and not joined and not libuv:
        found.append((0.4 if view.origins else 0.55, "a store operation failed", store, _REACH_FIX))
    silent = view.of("c10d.store_socket")
    if silent and not store and not joined and not unreached:
        found.append((0.3, "the rendezvous store stopped answering", silent, _REACH_FIX))
    refused = [
        (e, s)
        for e, s in view.of("c10d.connection_refused", "c10d.unreachable")
        if s.host is None and _STORE_LINE.search(s.text)
    ]
    peers = view.has("nccl.connect_failed", "gloo.connect_failed")
    if refused and not unreached and not peers:
        found.append(
            (
                0.4 if view.origins else 0.6,
                "a connection to the store was refused or unroutable",
                refused,
                _REACH_FIX,
            )
        )
    horovod = view.of("horovod.tasks_not_started")
    if horovod:
        what = "Horovod's workers did not all reach its launcher's rendezvous"
        found.append((0.55, what, horovod, _HOROVOD_FIX))
    mpi = view.of("mpi.tcp_unreachable")
    if mpi:
        what = "MPI's daemons could not open TCP connections between the hosts"
        found.append((0.55, what, mpi, _MPI_FIX))
    unrouted = view.of("c10d.unreachable")
    if unrouted and not refused and not unreached and not peers and not _web(unrouted):
        found.append((0.3, "a host is unreachable from this one", unrouted, _REACH_FIX))
    closed = view.closed_in_setup()
    if closed:
        found.append(
            (0.4, "NCCL's own setup connections were closed under it", closed, _CLOSED_FIX)
        )
    return found


def _web(items: list[Signal]) -> bool:
    """Whether any of these lines is the job's own web traffic (a model or dataset
    download), not the rendezvous."""
    return any(_WEB.search(s.text) for _, s in items)


_WEB = re.compile(r"https?://|HTTPS?ConnectionPool|urllib3|requests\.exceptions|port=(?:443|80)\b")


def _raised_by_distributed(view: CommView, line: str) -> bool:
    """Whether a traceback with this message came out of torch.distributed (its launcher or
    rendezvous resolving MASTER_ADDR), not out of user code's own networking."""
    return any(
        t.message and t.message in line and any(_DISTRIBUTED.search(f.file) for f in t.frames)
        for _, t in view.errors()
    )


def _own_failure(view: CommView, items: list[Signal]) -> bool:
    """Whether the ranks that cannot reach the store are the ones whose failure came first."""
    origin_ranks = {o.rank for o in view.origins}
    return any(s.rank in origin_ranks for _, s in items)
