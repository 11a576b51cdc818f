"""comm.wrong_interface from the environment: NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME names
an interface this host lacks, one that is down, or only host-local ones."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import EnvironmentFacts, Interface
from triage.readers.environment import Item, environment_view, ranks_of, select_interfaces, who
from triage.registry import EvidenceSet, rule

#: variable -> whether it takes exact names (gloo) rather than NCCL's prefixes
_VARIABLES = {"NCCL_SOCKET_IFNAME": False, "GLOO_SOCKET_IFNAME": True}


@rule("env.wrong_interface", "comm.wrong_interface")
def wrong_interface(evidence: EvidenceSet) -> Iterator[Finding]:
    """A socket interface setting selects no usable interface on this host.

    What it detects:
    For NCCL_SOCKET_IFNAME (NCCL's syntax: prefixes, `=` for exact names, `^` to exclude)
    and GLOO_SOCKET_IFNAME (exact, comma-separated names) as each rank's environment sets
    them: no interface of this host matches; every match is down; or only loopback and
    container bridges (lo, docker0, br-*, veth*) match in a job that spans hosts.

    Why it happens:
    Launch scripts copied from another cluster (ib0, eth1, ens*), container images whose
    interface names differ from the host's, or an exclusion list that leaves only docker0.
    gloo then fails with `Unable to find address for`, NCCL with `no socket interface
    found`, or ranks bind to addresses other hosts cannot reach and hang at setup.

    Evidence:
    The variable's value per rank and the interfaces it can bind to (the host's: name,
    up/down, MTU, addresses; or, for a rank in its own network namespace, that
    namespace's interface names) from check_environment.

    Fix:
    Set the variable to the interface that holds this host's routable address (`ip -br
    addr`; the one on MASTER_ADDR's subnet), identically on every host, or unset it;
    exclude virtual interfaces with NCCL_SOCKET_IFNAME=^docker,lo.

    Known false positives:
    Ranks on other hosts were not inspected: a name that exists only there is correct for
    them. Loopback-only settings are fine for single-host jobs (not reported then).

    References:
    NCCL environment variables (NCCL_SOCKET_IFNAME); torch.distributed docs, "Choosing the
    network interface to use" (GLOO_SOCKET_IFNAME).
    """
    view = environment_view(evidence)
    if view.host is None:
        return
    host_evidence, host = view.host
    sources = view.ranks or [view.host]
    multi_host = view.multi_host()
    for variable, exact in _VARIABLES.items():
        by_setting: dict[tuple[str, tuple[str, ...]], list[Item]] = {}
        for item in sources:
            value = item[1].variables.get(variable)
            if value is not None:
                seen = tuple(i.name for i in _interfaces(item[1], host))
                by_setting.setdefault((value, seen), []).append(item)
        for (value, names), pairs in by_setting.items():
            verdict = _judge(value, exact, _interfaces(pairs[0][1], host), multi_host)
            if verdict is None:
                continue
            confidence, problem = verdict
            holders = [f for _, f in pairs]
            where = "its container's network" if pairs[0][1].interfaces else host.host
            yield Finding(
                title=f"{variable}={value} {problem}",
                summary=f"{who(holders)} set {variable}={value}, which {problem} on {where} "
                f"(interfaces: {', '.join(names) or 'none'}).",
                ranks=ranks_of(holders),
                confidence=confidence,
                evidence=list(dict.fromkeys([e.id for e, _ in pairs] + [host_evidence.id])),
                fix=f"Set {variable} to the interface that carries this host's routable address "
                "(`ip -br addr`; the one on MASTER_ADDR's subnet), the same on every host, or unset "
                "it; exclude virtual interfaces with NCCL_SOCKET_IFNAME=^docker,lo.",
                confirm=f"the ranks' logs show gloo's `Unable to find address for` or NCCL's "
                f"`no socket interface found`, or `ip -br addr` lacks the name {variable} gives",
            )


def _interfaces(facts: EnvironmentFacts, host: EnvironmentFacts) -> list[Interface]:
    """What the rank can bind to: its own network namespace's interfaces, else the host's."""
    return facts.interfaces or host.interfaces


def _judge(
    value: str, exact: bool, interfaces: list[Interface], multi_host: bool | None
) -> tuple[float, str] | None:
    """(confidence, what is wrong) for one setting, or None when it selects a usable interface."""
    by_name = {i.name: i for i in interfaces}
    chosen = [by_name[n] for n in select_interfaces(value, by_name, exact_only=exact)]
    if exact:
        wanted = [w.strip() for w in value.split(",") if w.strip()]
        missing = [w for w in wanted if w not in by_name]
        if missing and len(missing) < len(wanted):
            verb = "does" if len(missing) == 1 else "do"
            return 0.88, f"names {', '.join(missing)}, which {verb} not exist"
    if not chosen:
        return 0.88, "matches no interface"
    if all(i.up is False for i in chosen):
        return 0.8, f"selects only interfaces that are down ({', '.join(i.name for i in chosen)})"
    usable = [i for i in chosen if i.up is not False]
    if all(i.loopback or i.virtual for i in usable):
        if multi_host is False:
            return None
        kinds = ", ".join(i.name for i in usable)
        confidence = 0.72 if multi_host else 0.45
        return confidence, f"selects only host-local interfaces ({kinds}) other hosts cannot reach"
    return None
