"""comm.wrong_interface from logs: NCCL or gloo uses (or is told) a network interface that
cannot carry the job's traffic."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import BOOTSTRAP_FILE, CommView, comm_view, quote
from triage.rules.logs._signals import Found, ids, ranks_of, strongest
from triage.text import rank_label

_SETUP = re.compile(r"init_process_group|ProcessGroup|new_group|barrier|all_reduce|NCCL|gloo")


@rule("logs.wrong_interface", "comm.wrong_interface")
def wrong_interface(evidence: EvidenceSet) -> Iterator[Finding]:
    """NCCL or gloo picked, or was told to use, an interface other hosts cannot reach.

    What it detects:
    gloo's `Unable to find address for: <if>` (GLOO_SOCKET_IFNAME names an absent
    interface), its loopback fallback, pairs connecting to `[127.0.1.1]` and
    `connectFullMesh failed`, its `makeDeviceForHostname(): unsupported gloo device` (0.6: on
    Windows a VPN or virtual adapter) and hosts whose addresses differ in family (`ss1.ss_family
    == ss2.ss_family. 2 vs 10`, 0.6); vLLM's `Every node should have a unique IP address`
    (0.55: VLLM_HOST_IP copied across nodes, containers on a bridge); NCCL's `no socket interface found` / `NET/Socket : no
    interface found` / `no device found matching ib0, verify NCCL_OOB_NET_IFNAME` / `No usable
    listening interface found` (NCCL_SOCKET_IFNAME matches nothing), and GCP's TCPX/TCPXO
    plugins' `NET/GPUDirectTCPX : no ctrl interface found` (their NCCL_GPUDIRECTTCPX_* or
    NCCL_FASTRAK_* interface names match none the pod has); NCCL's `Socket creation
    failed : Address family not supported by protocol` (an IPv6 address where the kernel or
    container has none, or no IP interface in the container); NCCL connections to a
    docker0, loopback or link-local address; a bootstrap on docker0/lo in a multi-host job;
    NCCL socket connections that fail (refused, unreachable, aborted) with no other cause;
    a multi-host NCCL log over sockets that stops during communicator setup; NCCL_DEBUG=INFO's
    trace of a failed call up through bootstrap.cc (`bootstrap.cc:270 -> 2`: the bootstrap's
    sockets, which it uses whatever the transport; 0.45 across hosts, 0.35 on one); low
    (0.3), a bare NCCL internal or system error across hosts that no line explains.

    Why it happens:
    Multi-homed hosts (docker0, bridges, VPN, management and data NICs) give NCCL and gloo
    several candidates; they pick by name prefix and order, and launch scripts copied from
    another cluster set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to names this host lacks. A rank
    that advertises an address other hosts cannot route to is unreachable to them.

    Evidence:
    The interface and address lines (`Bootstrap : Using`, `NET/Socket : Using`), the failed
    connects and their reasons, the *_SOCKET_IFNAME values NCCL echoed.

    Fix:
    Set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface that carries the
    hosts' routable addresses (`ip -br addr`; the one holding the MASTER_ADDR subnet), the
    same on every host; exclude virtual ones with `^docker,lo`. Open the firewall between
    hosts for NCCL's ephemeral ports.

    Known false positives:
    A connect that is refused because the peer process already died: when another rank's
    own failure is visible the connect failures score lower and comm.peer_failure leads.

    References:
    NCCL environment variables (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY); torch.distributed
    docs, "Common environment variables" (GLOO_SOCKET_IFNAME).
    """
    view = comm_view(evidence)
    found = _findings(view)
    if not found:
        return
    (confidence, what, items, fix), every = strongest(found)
    ranks = ranks_of(s for _, s in items)
    yield Finding(
        title=what + (f" ({rank_label(ranks)})" if ranks else ""),
        summary=f"{what}: `{quote(items)}`." + _interfaces(view),
        ranks=ranks,
        location=view.location(ranks, _SETUP),
        confidence=confidence,
        evidence=ids(every)[:8],
        fix=fix,
        confirm=(
            "the interface the rank uses (Bootstrap/NET/Socket lines) is not the one holding "
            "the hosts' routable addresses (`ip -br addr` on each host)"
        ),
    )


_IFNAME_FIX = (
    "Set {var} to an interface that exists on every host and carries their routable "
    "addresses (`ip -br addr`), or unset it to let the library choose."
)


#: NCCL's bootstrap: a TCP ring over the socket interface that every rank joins first.


def _findings(view: CommView) -> list[Found]:
    overrides = view.overrides()
    multi = view.multi_host
    found: list[Found] = []
    gloo = view.of("gloo.no_address")
    if gloo:
        name = gloo[0][1].fields.get("interface", "")
        found.append(
            (
                0.9,
                f"gloo cannot find interface {name}",
                gloo,
                _IFNAME_FIX.format(var="GLOO_SOCKET_IFNAME"),
            )
        )
    ips = view.of("vllm.node_ips")
    if ips:
        fields = ips[0][1].fields
        found.append(
            (
                0.55,
                f"{fields['nodes']} Ray nodes report {fields['ips']} IP addresses: the address"
                " each node uses is not its own",
                ips,
                "Give each node the address the others reach it on: VLLM_HOST_IP (and Ray's"
                " --node-ip-address) set per node, never copied from the head; host networking"
                " for containers; the interface in NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME alike.",
            )
        )
    unusable = view.of("gloo.unusable_device")
    if unusable:
        fields = unusable[0][1].fields
        what = (
            f"gloo's hosts have addresses of two families ({fields['family']}: IPv4 against IPv6)"
            if fields.get("family")
            else "gloo cannot make its device from this host's name or interface"
        )
        found.append((0.6, what, unusable, _IFNAME_FIX.format(var="GLOO_SOCKET_IFNAME")))
    horovod = view.of("horovod.no_common_interface")
    if horovod:
        found.append(
            (
                0.6,
                "horovodrun found no network interface its hosts reach each other on",
                horovod,
                "Give horovodrun an interface with the same name on every host that they reach"
                " each other on (--network-interface, HOROVOD_GLOO_IFACE and NCCL_SOCKET_IFNAME"
                " alike); rename it to match where hosts differ, and open the ports between"
                " them (no NAT or firewall in the way).",
            )
        )
    missing = view.of("nccl.no_interface", "nccl.no_net_interface")
    if missing:
        ifname = overrides.get("NCCL_SOCKET_IFNAME")
        told = f" (NCCL_SOCKET_IFNAME={ifname})" if ifname else ""
        found.append(
            (
                0.9 if ifname else 0.8,
                f"NCCL found no usable socket interface{told}",
                missing,
                _IFNAME_FIX.format(var="NCCL_SOCKET_IFNAME"),
            )
        )
    family = view.of("nccl.socket_family")
    if family:
        found.append(
            (
                0.6,
                "NCCL cannot open a socket of its interface's address family",
                family,
                "Give NCCL an interface with an IPv4 address: NCCL_SOCKET_FAMILY=AF_INET, or"
                " NCCL_SOCKET_IFNAME=<the host's data NIC>; in a container, run it with an IP"
                " interface (--network host, or a network the runtime gives it) and the"
                " address family the kernel supports.",
            )
        )
    connects = view.of("nccl.connect_failed")
    local = [(e, s) for e, s in connects if s.fields.get("address_kind")]
    if local:
        kind = local[0][1].fields["address_kind"]
        found.append(
            (
                0.8 if multi is not False else 0.7,
                f"NCCL connects to a {kind} address that other hosts cannot reach",
                local,
                "NCCL advertised a docker0/loopback address: set NCCL_SOCKET_IFNAME to the "
                "host's real interface (e.g. `^docker,lo` or the data NIC) on every host.",
            )
        )
    elif connects:
        found.append(
            (
                0.4 if view.origins else 0.55,
                "NCCL cannot open sockets to its peers",
                connects,
                "Check that every host reaches the others' addresses on the interface NCCL "
                "uses (NCCL_SOCKET_IFNAME), and that no firewall blocks NCCL's ephemeral ports.",
            )
        )
    pairs = view.of("gloo.pair_connect")
    looped = [(e, s) for e, s in pairs if s.fields.get("address_kind") == "loopback"]
    if looped:
        found.append(
            (
                0.85,
                "gloo peers advertise a loopback address (the hostname resolves to 127.0.x.x)",
                looped,
                "Set GLOO_SOCKET_IFNAME to the data interface on every host, or make the "
                "hostname resolve to the host's routable address (/etc/hosts maps it to "
                "127.0.1.1 on Debian/Ubuntu).",
            )
        )
    mesh = view.of("gloo.connect_failed") + [p for p in pairs if p not in looped]
    if mesh:
        found.append(
            (
                0.4 if view.origins else 0.6,
                "gloo cannot connect its ranks to each other",
                mesh,
                _IFNAME_FIX.format(var="GLOO_SOCKET_IFNAME")
                + " Check that no firewall blocks the ports between the hosts.",
            )
        )
    virtual = [(e, s) for e, s in view.of("nccl.bootstrap_interface") if s.fields.get("virtual")]
    if virtual and multi and (view.comm_failures() or view.stalled_in_setup()):
        name = virtual[0][1].fields.get("interface")
        found.append(
            (
                0.75,
                f"NCCL bootstraps over {name}, a host-local interface, in a multi-host job",
                virtual,
                _IFNAME_FIX.format(var="NCCL_SOCKET_IFNAME"),
            )
        )
    loopback = view.of("gloo.loopback_fallback")
    # the warning is no failure by itself (a single host runs over the loopback alike); its
    # error form (`Cannot resolve node-03 to a (local) address`, which names the host) is
    warned = [item for item in loopback if "host" not in item[1].fields]
    failed = [f for f in view.comm_failures() if f not in warned]
    if loopback and multi is not False and failed:
        found.append(
            (
                0.7,
                "gloo fell back to the loopback address",
                loopback,
                _IFNAME_FIX.format(var="GLOO_SOCKET_IFNAME"),
            )
        )
    if multi and view.stalled_in_setup() and not view.uses_ib():
        found.append(
            (
                0.45,
                "a multi-host NCCL job over sockets stops during communicator setup",
                view.of("nccl.bootstrap_interface", "nccl.socket_interfaces", "nccl.init"),
                _IFNAME_FIX.format(var="NCCL_SOCKET_IFNAME"),
            )
        )
    bootstrap = [
        (e, s)
        for e, s in view.of("nccl.error_trace")
        if BOOTSTRAP_FILE.search(str(s.fields["file"]))
    ]
    if bootstrap and not found:
        # a connection the peer closed was made: the interface carried it
        reached = bool(view.closed_in_setup())
        found.append(
            (
                0.3 if reached else 0.45 if multi is not False else 0.35,
                "NCCL's bootstrap failed in its socket calls",
                bootstrap + view.of("nccl.bootstrap_interface", "nccl.ib_devices"),
                _IFNAME_FIX.format(var="NCCL_SOCKET_IFNAME")
                + " The bootstrap always uses sockets, InfiniBand or not: the out-of-band"
                " interface (`OOB` in `NET/IB : Using`, `Bootstrap : Using`) is the one it"
                " needs. Check that no firewall blocks the ports between the hosts.",
            )
        )
    unnamed = view.unnamed("internal", "system") if multi and not view.uses_ib() else []
    if unnamed and not found:
        found.append(
            (
                0.3,
                "NCCL failed across hosts with no line naming the call; the socket interface "
                "is the usual suspect",
                unnamed,
                _IFNAME_FIX.format(var="NCCL_SOCKET_IFNAME"),
            )
        )
    return found


def _interfaces(view: CommView) -> str:
    chosen = sorted(
        {
            f"{s.fields['interface']}:{s.fields['address']}"
            for _, s in view.of("nccl.bootstrap_interface")
        }
    )
    return f" NCCL's bootstrap uses {', '.join(chosen[:4])}." if chosen else ""
