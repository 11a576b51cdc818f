"""c10d rendezvous, TCPStore and gloo: the sockets that set a job up and carry gloo traffic.

Rendezvous failures are the store's server socket that cannot listen (the port is
taken), clients that cannot reach it (wrong MASTER_ADDR/port, firewall, a host that
does not resolve) and nodes that never join. torch reworded them over the years:

- torch <= 2.1: `[W socket.cpp:401] [c10d] The server socket has failed to bind to
  [::]:29400 (errno: 98 - Address already in use).` then `...failed to listen on any
  local network address.`; clients `The client socket has timed out after 60s while
  trying to connect to 10.0.0.1:29500` (or `(10.0.0.1, 29500)`).
- torch >= 2.2: `DistNetworkError: The server socket has failed to listen on any local
  network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message:
  address already in use`; `The client socket has timed out after 2000ms while trying to
  connect to (host, port).`; `TCP client failed to connect/validate to host H:P`.

Lines that report a peer's death rather than this process's own failure (gloo's
`Connection closed by peer`, `Connection reset by peer`, a store read of 0 bytes, a
broken pipe on a gloo or store socket) are marked `peer_symptom`.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import first_of, signature
from triage.readers.signatures.nccl import address_kind

# --- the store's server socket ----------------------------------------------------------

signature(
    "c10d.bind_failed",
    # Windows says `(system error: 10048 - Only one usage of each socket address ...)`
    r"failed to bind to (?P<address>\S+?)(?::(?P<port>\d+))? \((?:errno|system error):"
    r" (?P<errno>\d+) - (?P<reason>[^)]+)\)",
    anchors="failed to bind to",
    summary="the store's server socket could not bind its address (errno 98: port in use)",
)

# The store's server socket coming up (rank 0, TORCH_CPP_LOG_LEVEL=INFO or
# TORCH_DISTRIBUTED_DEBUG=DETAIL): a step of process-group setup, no failure.
signature(
    "c10d.store_listening",
    r"The server socket has started to listen on (?P<address>\S+?)\.?$",
    anchors="The server socket has started to listen on",
    summary="the rendezvous store's server socket started listening (process-group setup)",
)

signature(
    "c10d.listen_failed",
    r"failed to listen on any local network address\.?"
    r"(?:.*?port: (?P<port>\d+))?(?:.*?name: (?P<errname>E[A-Z]+))?(?:.*?message: (?P<reason>.+))?",
    anchors="failed to listen on any local network address",
    summary="the store's server socket could not listen on the rendezvous port",
)

signature(
    "c10d.address_in_use",
    # accelerate checks the port itself before it launches: `Tried to launch distributed
    # communication on port `29500`, but another process is utilizing it.`
    r"[Aa]ddress already in use|\bEADDRINUSE\b"
    r"|on port `?(?P<port>\d+)`?, but another process is utilizing it",
    anchors=(
        "Address already in use",
        "address already in use",
        "EADDRINUSE",
        "but another process is utilizing it",
    ),
    summary="a socket's port is already taken by another process (EADDRINUSE)",
)

# --- clients reaching the store ---------------------------------------------------------


def _timeout(found: re.Match[str]) -> dict[str, Any]:
    host = found["host"] or found["host2"]
    return {"host": host} if host else {}


signature(
    "c10d.client_timeout",
    r"(?:client socket has timed out after (?P<timeout>\d+\s*m?s) while trying to connect to "
    r"(?:\((?P<host>[^,()\s]+), (?P<port>\d+)\)|(?P<host2>[^\s:]+):(?P<port2>\d+))"
    r"|connect\(\) timed out\. Original timeout was (?P<timeout_ms>\d+) ms)",
    anchors=("client socket has timed out", "connect() timed out"),
    summary="a client could not reach the rendezvous store (MASTER_ADDR/PORT) before its timeout",
    extract=_timeout,
)

signature(
    "c10d.store_connect",
    r"TCP client failed to connect/validate to host (?P<host>\S+?):(?P<port>\d+) - (?P<state>timed out|retrying)"
    # torch_xla's XRT mesh service (its rendezvous before PJRT): `Failed to connect to client
    # mesh master: host:43781`
    r"|Failed to connect to client mesh master: (?P<mesh_host>[^\s:]+):(?P<mesh_port>\d+)",
    anchors=("TCP client failed to connect", "Failed to connect to client mesh master"),
    summary="the TCPStore client failed to connect to the store host",
    extract=first_of(host=("host", "mesh_host"), port=("port", "mesh_port")),
)


def _connect(found: re.Match[str]) -> dict[str, Any]:
    host = found["host"] or found["host2"] or found["host3"] or ""
    # errno 99 on [localhost] is the IPv6 attempt of a loopback store: noise, not a failure
    return {"host": host, "noise": found["errno"] == "99" and host in ("localhost", "::1")}


# One address's attempt (`... to [node-03]:29500 (errno: 111 - Connection refused)`), and the
# client's last word once every address failed (`... to any network address of (node-03,
# 29500).`).
signature(
    "c10d.connect_failed",
    r"client socket has failed to connect to (?:\[(?P<host>[^\]]+)\]|(?P<host2>[^\s:]+)):(?P<port>\d+)"
    r" \(errno: (?P<errno>\d+) - (?P<reason>[^)]+)\)"
    r"|client socket has failed to connect to any network address of \((?P<host3>[^,()\s]+),"
    r" (?P<port3>\d+)\)",
    anchors="client socket has failed to connect to",
    summary="a client's connection attempt to the store failed (refused, unreachable)",
    extract=_connect,
)

signature(
    "c10d.connection_refused",
    r"Connection refused",
    anchors="Connection refused",
    summary="a connection was refused: nothing listens on that address and port",
)

signature(
    "c10d.unreachable",
    r"(?P<reason>Network is unreachable|No route to host)",
    anchors=("Network is unreachable", "No route to host"),
    summary="the destination host or network cannot be reached from this host",
)


def _resolution(found: re.Match[str]) -> dict[str, Any]:
    where = re.search(
        r"(?P<family>IPv[46] )?network addresses of \((?P<host>[^,]+), ", found.string
    )
    if not where:
        return {}
    out: dict[str, Any] = {"host": where["host"]}
    if where["family"]:
        out["family"] = where["family"].strip()
    return out


signature(
    "c10d.name_resolution",
    r"(?P<reason>Name or service not known|Temporary failure in name resolution"
    r"|nodename nor servname provided|No address associated with hostname|gaierror)",
    anchors=(
        "Name or service not known",
        "Temporary failure in name resolution",
        "nodename nor servname provided",
        "No address associated with hostname",
        "gaierror",
    ),
    summary="a hostname (MASTER_ADDR, a node name) does not resolve",
    extract=_resolution,
)

# --- rendezvous -------------------------------------------------------------------------

signature(
    "c10d.rendezvous_timeout",
    r"RendezvousTimeoutError",
    anchors="RendezvousTimeoutError",
    summary="torchelastic's rendezvous timed out before enough nodes joined",
)

signature(
    "c10d.rendezvous_connection",
    r"RendezvousConnectionError(?::\s*(?P<message>.*))?",
    anchors="RendezvousConnectionError",
    summary="torchelastic could not reach the rendezvous store",
)

signature(
    "c10d.rendezvous_closed",
    r"RendezvousClosedError",
    anchors="RendezvousClosedError",
    summary="the rendezvous was closed by another node's agent (it failed or shut down)",
    peer_symptom=True,
)

signature(
    "c10d.clients_timeout",
    r"Timed out after (?P<seconds>\d+) seconds waiting for clients\. (?P<joined>\d+)/(?P<expected>\d+) clients joined",
    anchors="waiting for clients",
    summary="the store's server waited in vain for every client (some ranks or nodes never connected)",
    extract=lambda found: {"joined": int(found["joined"]), "expected": int(found["expected"])},
)

signature(
    "c10d.store_error",
    r"DistStoreError(?::\s*(?P<message>.*))?"
    # the client's check that the store answers (another service on MASTER_PORT), and
    # FileStore's wait for a key (file:// init: a rank that never wrote it)
    r"|Ping failed, invalid value returned from server"
    r"|Timeout waiting for key: (?P<entry>\S+) after (?P<ms>\d+) ms",
    anchors=("DistStoreError", "Ping failed, invalid value", "Timeout waiting for key: "),
    summary="a TCPStore operation failed (timeout waiting for a key or for clients)",
)

# The TCPStore client's own words when the store stops answering (its host, rank 0 or the
# launcher's agent, is gone or unreachable), without the DistStoreError type around them.
signature(
    "c10d.store_socket",
    r"\bSocket Timeout\b|Stop_waiting response is expected",
    anchors=("Socket Timeout", "Stop_waiting response is expected"),
    summary="the rendezvous store did not answer (its host stopped or cannot be reached)",
)

# TCPStore's libuv backend, the default since torch 2.4, is missing from builds without it
# (the Windows wheels, some source builds): every store creation fails the same way.
signature(
    "c10d.libuv_missing",
    r"use_libuv was requested but PyTorch was buil[dt] without libuv support",
    anchors="use_libuv was requested",
    summary="the rendezvous store asked for its libuv backend, which this torch build lacks",
)

# An init_method whose scheme this torch build has no handler for: env:// and tcp:// on
# Windows before torch 1.8 (only file:// there), a misspelt scheme.
signature(
    "c10d.no_handler",
    r"No rendezvous handler for (?P<scheme>\w*)://",
    anchors="No rendezvous handler for",
    summary="init_process_group's init_method names a scheme this torch build cannot serve",
)

# --- peers going away -------------------------------------------------------------------

# gloo's pair: `Connection closed by peer [10.0.0.2]:45123`, and its reads and writes on a
# socket the other end closed (`Socket unexpectedly closed [10.0.0.2]:45123`, `Socket closed`).
signature(
    "gloo.connection_closed",
    r"(?:Connection closed by peer|Socket (?:unexpectedly )?closed) \[?(?P<peer>[^\]\s]+)\]?:"
    r"(?P<port>\d+)",
    anchors=("Connection closed by peer", "Socket unexpectedly closed", "Socket closed"),
    summary="gloo's peer closed the connection: that process exited or crashed",
    peer_symptom=True,
)

# A collective on a communicator this rank's watchdog already aborted after a peer's
# failure: `NCCL communicator was aborted on rank 3.` (torch 1.6-1.9: without the rank; older torch appends `Original reason
# for failure was:` and, for a timeout or an error of this rank's own, that is no lost peer).
#: What an abort's stated reason says when the failure was a peer's.
ABORT_PEER_REASON = r"(?:remote process exited|[Cc]onnection (?:closed|reset)|ncclRemoteError)"

signature(
    "nccl.communicator_aborted",
    r"NCCL communicator was aborted(?: on rank (?P<aborted_on>\d+))?\.?(?!.*(?:[Tt]imeout|timed out))"
    # ... unless the reason it gives is this rank's own error, not a peer's
    r"(?!.*Original reason for failure was:(?!.*" + ABORT_PEER_REASON + r"))",
    anchors="NCCL communicator was aborted",
    summary="a collective met a communicator its watchdog had aborted after an earlier failure",
    peer_symptom=True,
)

# c10d's socket send to a peer or the store whose other end is gone: `Failed to send, sent 0
# bytes. Connection was likely closed. Did the remote end crash?`
signature(
    "net.send_closed",
    r"Connection was likely closed\. Did the remote end crash\?",
    anchors="Connection was likely closed",
    summary="a send found its connection closed: the process on the other end likely died",
    peer_symptom=True,
)

# ProcessGroupNCCL (torch >= 2.6) names the peer whose failure reached it through NCCL's
# remote-error path: `[PG ID 2 PG GUID 5 Rank 3]  remote error detected from rank: 6`; older
# torch (1.8-1.13, NCCL_ASYNC_ERROR_HANDLING) names the rank that aborted its communicators
# first, from the key it left in the store: `[Rank 3] Found key in store: NCCLABORTEDCOMM:..,
# from rank: 0. This means that rank has aborted its NCCL communicators previously`.
signature(
    "nccl.remote_error_from",
    r"remote error detected from rank:? ?(?P<from_rank>\d+)"
    r"|Found key in store: \S+, from rank: (?P<aborted>\d+)\. This means that rank has aborted",
    anchors=("remote error detected from rank", "This means that rank has aborted"),
    summary="NCCL reported an error from a named remote rank: that rank failed first",
    peer_symptom=True,
    extract=lambda found: {
        "from_rank": int(found["from_rank"] or found["aborted"]),
        "how": "aborted" if found["aborted"] else "remote error",
    },
)

# A socket call in NCCL, gloo or the store failing with EMFILE: one socket per peer
# connection meets the process's open-files limit (1024 soft by default) at scale.
signature(
    "net.fd_exhausted",
    r"(?:nccl|NCCL|[Ss]ocket|[Bb]ootstrap|[Gg]loo|[Aa]ccept|[Cc]onnect)\S*.{0,80}?"
    r"(?:Too|too) many open files",
    anchors=("Too many open files", "too many open files"),
    summary="a communication socket could not be opened: the open-files limit is reached",
)

# Horovod's words on every surviving rank once one rank raised or finished early.
signature(
    "horovod.shut_down",
    r"Horovod has been shut down",
    anchors="Horovod has been shut down",
    summary="Horovod stopped because another rank raised or finished: that rank failed first",
    peer_symptom=True,
)

signature(
    "net.connection_reset",
    r"Connection reset by peer",
    anchors="Connection reset by peer",
    summary="the remote end reset the connection: that process died or dropped it",
    peer_symptom=True,
)

signature(
    "c10d.recv_closed",
    r"[Ff]ailed to recv, got 0 bytes",
    anchors="got 0 bytes",
    summary="the store's server closed the connection (the rank hosting the store died)",
    peer_symptom=True,
)

signature(
    "net.broken_pipe",
    r"(?:sendBytes failed|[Ww]rite error|gloo|pair\.cc|TCPStore|DistNetworkError|RuntimeError)\b.*?Broken pipe",
    anchors="Broken pipe",
    summary="a write to a gloo or store socket failed: the reader on the other end is gone",
    peer_symptom=True,
)

# gloo's receiving pair meets more bytes than the collective it runs expects: the ranks are
# in collectives of different sizes (torch 2.x adds `Received data size doesn't match
# expected size. Is there a distributed collective mismatch in your code?`).
signature(
    "gloo.size_mismatch",
    r"op\.preamble\.length <= op\.nbytes\. (?P<received>\d+) vs (?P<expected>\d+)"
    r"|Received data size doesn't match expected size"
    # the libuv transport's (macOS, Windows): `op.nread == op.preamble.nbytes`
    r"|op\.nread == op\.preamble\.nbytes",
    anchors=(
        "op.preamble.length <= op.nbytes",
        "Received data size doesn't match expected size",
        "op.nread == op.preamble.nbytes",
    ),
    summary="gloo received more bytes than its collective expects: the ranks' collectives differ"
    " in size",
)

# --- gloo's own setup -------------------------------------------------------------------

signature(
    "gloo.no_address",
    r"Unable to find (?:address|interface) for:? (?P<interface>\S+)",
    anchors=("Unable to find address for", "Unable to find interface for"),
    summary="gloo cannot find the interface GLOO_SOCKET_IFNAME names",
)

# gloo could not make its device from the host's name or the interface it was given (on
# Windows a VPN or Hyper-V adapter, or a hostname resolving to kubernetes.docker.internal),
# and a pair of hosts whose addresses are of two families (IPv4 against IPv6: `ss1.ss_family
# == ss2.ss_family. 2 vs 10`).
signature(
    "gloo.unusable_device",
    r"makeDeviceFor(?P<by>Hostname|Interface)\(\): unsupported gloo device"
    r"|ss1\.ss_family == ss2\.ss_family\. (?P<family>\d+ vs \d+)",
    anchors=("unsupported gloo device", "ss1.ss_family == ss2.ss_family"),
    summary="gloo cannot use the address its host name or interface gives it",
)

signature(
    "gloo.loopback_fallback",
    r"Unable to resolve hostname to a \(local\) address"
    r"|Cannot resolve (?P<host>\S+) to a \(local\) address",
    anchors=("Unable to resolve hostname to a (local) address", "to a (local) address"),
    summary="gloo fell back to the loopback address: other hosts cannot reach this rank",
)


def _pair(found: re.Match[str]) -> dict[str, Any]:
    kind = address_kind(found["address"])
    return {"address_kind": kind} if kind else {}


signature(
    "gloo.pair_connect",
    r"\bconnect \[(?P<address>[^\]]+)\]:(?P<port>\d+): (?P<reason>[^.]+)",
    anchors="connect [",
    summary="a gloo pair could not connect to a peer's address (refused, unreachable, timed out)",
    extract=_pair,
)

signature(
    "gloo.connect_failed",
    r"(?:Gloo connectFullMesh failed with (?P<detail>.*)|Connect timeout (?P<peer>\S+))",
    anchors=("connectFullMesh failed", "Connect timeout"),
    summary="gloo could not connect its full mesh of pairs between ranks",
)

# accelerate's debug-mode check before its gather and reduce operations: it compares the
# tensor shapes of every process and lists them, one line each.
signature(
    "accelerate.shape_mismatch",
    r"Cannot apply desired operation due to shape mismatches",
    anchors="due to shape mismatches",
    summary="accelerate compared the processes' tensor shapes before a collective: they differ",
)

signature(
    "accelerate.process_shape",
    r"^\s*- Process (?P<process>\d+): (?P<shape>\S.*?)\s*$",
    anchors="- Process ",
    summary="one process's tensor shape in accelerate's shape-mismatch report",
)
