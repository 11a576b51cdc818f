"""comm.nccl_env_override from the environment: NCCL_* settings that force a transport,
topology or algorithm, or that differ between ranks."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.environment import differing, environment_view, odd_ones, spread, who
from triage.registry import EvidenceSet, rule
from triage.text import agree

#: Settings that override NCCL's own choice of algorithm, protocol, topology or transport.
FORCING = frozenset(
    {
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_GRAPH_FILE",
        "NCCL_TOPO_FILE",
        "NCCL_P2P_LEVEL",
        "NCCL_NET",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_CROSS_NIC",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_NTHREADS",
        "NCCL_BUFFSIZE",
        "NCCL_LAUNCH_MODE",
        "NCCL_COLLNET_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_CUMEM_ENABLE",
    }
)
#: Settings that switch a transport off: usually workarounds, occasionally the cause.
DISABLING = frozenset({"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"})
#: Settings that do not change what NCCL does on the wire.
_NEUTRAL_PREFIXES = ("NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_ASYNC_ERROR_HANDLING")


@rule("env.nccl_env_override", "comm.nccl_env_override")
def nccl_env_override(evidence: EvidenceSet) -> Iterator[Finding]:
    """NCCL_* variables force NCCL's algorithm, protocol, topology or transport, or differ
    between ranks.

    What it detects:
    In the ranks' environment: NCCL_ALGO, NCCL_PROTO, NCCL_GRAPH_FILE, NCCL_TOPO_FILE,
    NCCL_P2P_LEVEL, NCCL_NET, NCCL_*NCHANNELS, NCCL_BUFFSIZE, ... (forcing), the
    NCCL_*_DISABLE switches (weaker), and any NCCL_* variable whose value differs between
    ranks (NCCL expects the same settings on every rank).

    Why it happens:
    Tuning or workaround settings copied from another machine or an old issue stay in
    launch scripts and container images; a topology or graph file describes other
    hardware; one node's image sets what another's does not, so ranks pick different
    protocols and hang or fail at setup.

    Evidence:
    NCCL_* variables per rank (check_environment).

    Fix:
    Unset the forcing variables and let NCCL choose, then re-add one at a time if a
    measurement justifies it; make every rank's NCCL_* settings identical.

    Known false positives:
    Many overrides are deliberate and harmless; without a failing NCCL log this is a
    hint (moderate confidence), strongest when values differ between ranks.

    References:
    NCCL environment variables documentation.
    """
    view = environment_view(evidence)
    if not view.ranks:
        return
    facts = [f for _, f in view.ranks]
    ids = [e.id for e, _ in view.ranks]
    differ = {
        name: values
        for name, values in differing(facts).items()
        if name.startswith("NCCL_") and not name.startswith(_NEUTRAL_PREFIXES)
    }
    if differ:
        name, values = next(iter(differ.items()))
        yield Finding(
            title=f"{', '.join(differ)} differ between ranks",
            summary=f"NCCL settings differ between ranks: {name}: {spread(values)}. NCCL expects "
            "the same settings on every rank of a communicator.",
            ranks=odd_ones(values),
            confidence=0.6,
            evidence=ids,
            fix="Give every rank the same NCCL_* environment (one launch script / image for all "
            "nodes); unset overrides that only some nodes carry.",
            confirm="the ranks with the odd value are the ones that fail or stall at NCCL setup",
        )
        return
    forced = sorted({n for f in facts for n in f.variables if n in FORCING})
    disabled = sorted(
        {n for f in facts for n, v in f.variables.items() if n in DISABLING and v == "1"}
    )
    if not (forced or disabled):
        return
    shown = ", ".join(f"{n}={facts[0].variables.get(n, '?')}" for n in forced + disabled)
    yield Finding(
        title=f"NCCL settings forced: {shown}",
        summary=f"{who(facts)} {agree(len(facts), 'run')} with {shown}, overriding NCCL's own choice of "
        + ("algorithm, protocol, topology or transport." if forced else "transport."),
        ranks=[],
        confidence=0.45 if forced else 0.3,
        evidence=ids,
        fix="Unset the overrides and let NCCL choose; re-add one only if a measurement on this "
        "hardware justifies it (a topology or graph file must describe this machine).",
        confirm="the failure goes away with the NCCL_* overrides unset",
    )
