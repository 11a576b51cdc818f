"""comm.nccl_env_override from logs: NCCL_* settings that force a transport, topology or
algorithm, present when communication fails."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import CommView, comm_view
from triage.rules.logs._signals import ids

#: Variables that take a decision away from NCCL's topology detection.
FORCING = frozenset(
    {
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_P2P_LEVEL",
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_NET",
        "NCCL_NET_PLUGIN",
        "NCCL_TOPO_FILE",
        "NCCL_GRAPH_FILE",
        "NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_FAMILY",
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_NET_GDR_READ",
        "NCCL_CROSS_NIC",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_NVLS_ENABLE",
        "NCCL_COLLNET_ENABLE",
        "NCCL_CUMEM_ENABLE",
    }
)
#: Overrides that replace NCCL's view of the machine or its choice of algorithm outright.
_WHOLESALE = frozenset({"NCCL_TOPO_FILE", "NCCL_GRAPH_FILE", "NCCL_ALGO", "NCCL_PROTO"})


@rule("logs.nccl_env_override", "comm.nccl_env_override")
def nccl_env_override(evidence: EvidenceSet) -> Iterator[Finding]:
    """NCCL_* variables forced a transport, topology or algorithm, and communication failed.

    What it detects:
    NCCL's `<VAR> set by environment to <value>` lines (and `Loading topology file <path>`,
    NCCL_TOPO_FILE in force) for variables that override its own choices (NCCL_ALGO, NCCL_PROTO, NCCL_P2P_LEVEL/DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE,
    NCCL_NET, NCCL_TOPO_FILE, NCCL_GRAPH_FILE, NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) in a log
    that also shows a communication failure or a stall in setup. Alone they are not a
    finding: tuned clusters set many of them on purpose. Without any such line, NCCL's
    `Attribute arch of node cpu not found`: a topology XML file (NCCL_TOPO_FILE, maybe set
    by an image or a network plugin) that does not describe this machine. NCCL's `Failed to
    initialize any NET plugin` (0.55; 0.65 with NCCL_NET echoed): its own socket transport
    opens on any host with an interface, so NCCL_NET named one this host cannot open.

    Why it happens:
    Settings copied from another cluster's launch script or a vendor container describe
    hardware this job does not run on: a topology or graph file for another machine, an
    algorithm or protocol the topology cannot serve, a transport disabled on the only path
    between two GPUs, an HCA or interface that does not exist here.

    Evidence:
    The override lines NCCL echoed, next to the failure.

    Fix:
    Unset the overrides and let NCCL detect the topology; if the job then runs, re-add them
    one by one. Keep site-specific NCCL settings in the cluster's environment, not in the
    training script.

    Known false positives:
    Overrides that are right for the cluster while the failure has another cause: this is a
    hypothesis to test by unsetting them, ranked below any rule that names the failure
    itself.

    References:
    NCCL environment variables documentation.
    """
    view = comm_view(evidence)
    yield from _no_network(view)
    forced = [(e, s) for e, s in view.override_lines() if s.fields.get("variable") in FORCING]
    if not forced:
        yield from _topology_file(view)
        return
    failing = bool(view.comm_failures())
    stalled = view.stalled_in_setup()
    if not failing and not stalled:
        return
    settings = sorted({f"{s.fields['variable']}={s.fields.get('value', '')}" for _, s in forced})
    wholesale = any(s.fields.get("variable") in _WHOLESALE for _, s in forced)
    confidence = 0.4 if stalled and not failing else 0.5 if wholesale else 0.45
    shown = ", ".join(settings[:6]) + (
        f" and {len(settings) - 6} more" if len(settings) > 6 else ""
    )
    yield Finding(
        title=f"NCCL settings forced by the environment: {shown}",
        summary=(
            f"The environment overrides NCCL's own choices ({shown}) and communication "
            + ("stalls during setup." if stalled and not failing else "fails.")
            + " Settings copied from another machine often do not fit this one."
        ),
        ranks=[],
        confidence=confidence,
        evidence=ids(forced)[:8],
        fix=(
            f"Unset {', '.join(sorted({str(s.fields['variable']) for _, s in forced})[:6])} "
            "and rerun (NCCL also reads them from /etc/nccl.conf and ~/.nccl.conf); if the job "
            "then works, re-add them one at a time to find the one that does not fit this "
            "hardware."
        ),
        confirm="the job runs with the NCCL_* overrides unset",
    )


def _topology_file(view: CommView) -> Iterator[Finding]:
    """NCCL's topology lacks an attribute its own detection always fills: the topology came
    from an XML file (NCCL_TOPO_FILE, set by a user, an image or a network plugin) written
    for another machine or another set of GPUs, even where no log line shows the variable."""
    missing = [(e, s) for e, s in view.of("nccl.topology_unmodelled") if s.fields.get("from_file")]
    if not missing:
        return
    yield Finding(
        title="NCCL's topology file does not describe this machine",
        summary=f"NCCL fails on its topology (`{missing[0][1].fields.get('what')}`): an attribute"
        " its own detection always fills is missing, so the topology came from an XML file"
        " (NCCL_TOPO_FILE, set by the user, the image or a network plugin such as aws-ofi-nccl)"
        " made for another machine or another set of GPUs.",
        ranks=[],
        confidence=0.45,
        evidence=ids(missing)[:8],
        fix="Find who sets NCCL_TOPO_FILE (`env | grep NCCL`, the image, the network plugin's"
        " defaults) and unset it, or give NCCL a file for this instance type and GPU set; upgrade"
        " a network plugin that injects a static topology for the full machine.",
        confirm="the job runs with NCCL_TOPO_FILE unset (or NCCL_DEBUG=INFO shows the file NCCL"
        " loaded)",
    )


def _no_network(view: CommView) -> Iterator[Finding]:
    """No network transport opened: NCCL's built-in socket transport opens wherever an
    interface exists, so NCCL_NET (set by a recipe, a module or the image) restricted it to
    one this host cannot open: IB without its devices in the container, an OFI or gIB
    plugin missing from the library path or built for another NCCL."""
    failed = view.of("nccl.no_net_plugin")
    if not failed:
        return
    net = view.overrides().get("NCCL_NET")
    named = f"NCCL_NET={net}" if net else "NCCL_NET"
    yield Finding(
        title=f"NCCL could open no network transport: {named} names one this host cannot open",
        summary="NCCL failed with `Failed to initialize any NET plugin`: its own socket"
        f" transport opens on any host with an interface, so {named} (set by the job, the image,"
        " a module or the container recipe) restricted it to a transport that could not start"
        " here.",
        ranks=[],
        confidence=0.65 if net else 0.55,
        evidence=ids(failed)[:8],
        fix="Find who sets NCCL_NET (`env | grep NCCL`, the image's /etc/profile.d, a module,"
        " the container recipe, /etc/nccl.conf). On one node unset it or set NCCL_NET=Socket;"
        " across nodes make that transport loadable: the InfiniBand devices inside the"
        " container (--device /dev/infiniband, or the RDMA device plugin), its plugin"
        " (libnccl-net*.so: aws-ofi-nccl, gIB) on LD_LIBRARY_PATH and built for this NCCL.",
        confirm="`env | grep NCCL_NET` in the rank's environment names a transport, and the job"
        " starts with NCCL_NET=Socket on one node",
    )
