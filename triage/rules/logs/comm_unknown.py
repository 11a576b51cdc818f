"""comm.unknown from logs: NCCL or gloo failed, and no rule can say why."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import PEER_TEXT, TIMEOUT_TEXT, CommView, comm_view, quote
from triage.rules.logs._signals import Signal, ranks_of
from triage.text import rank_label

_COMM_ERROR = re.compile(r"NCCL error|NCCL Error|nccl\w*Error|[Gg]loo|ProcessGroupNCCL")
_GENERIC = ("nccl.error", "nccl.error_trace", "generic.comm_failure", "ccl.error")


@rule("logs.comm_unknown", "comm.unknown")
def comm_unknown(evidence: EvidenceSet) -> Iterator[Finding]:
    """An NCCL or gloo error that no specific comm rule explains.

    What it detects:
    torch's `NCCL error in: ... unhandled system error / internal error / invalid usage`,
    NCCL result codes (ncclSystemError, ncclInternalError, ...), NCCL_DEBUG=INFO's trace of
    a failed call (`transport/net.cc:1012 -> 2`), NCCL WARN lines other than
    harmless plugin probes, gloo's `connectFullMesh failed`, oneCCL's `|CCL_ERROR|`, with none of the signatures that
    name a cause (shared memory, interface, InfiniBand, P2P, rendezvous, versions), no lost
    peer, and no failure of another family (a duplicate GPU, an OOM, a timeout) that its own
    rules explain.

    Why it happens:
    Without NCCL_DEBUG=INFO, torch reports only the result code; the line that says what
    failed (`Last error:` or the NCCL WARN before the error) is missing or unrecognised.

    Evidence:
    The NCCL error and any WARN lines, per rank.

    Fix:
    Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET (NCCL_DEBUG_FILE=nccl.%h.%p for one
    file per process) and read the first `NCCL WARN` before the error and the `Last error:`
    line: it names the failing call (socket connect, shared memory, ibv_*, cudaIpc*). Check
    the interface (`Bootstrap : Using`), the transport per channel (`via P2P/SHM/NET`) and
    the NCCL_* overrides echoed as `set by environment to`.

    A socket call of NCCL, gloo or the store failing with `Too many open files` (EMFILE)
    reads stronger (0.5): one socket per peer meets the open-files limit at scale.

    Known false positives:
    None as such: it is the honest 'communication failed, cause not visible' answer.

    References:
    NCCL troubleshooting guide; NCCL_DEBUG and NCCL_DEBUG_SUBSYS.
    """
    view = comm_view(evidence)
    if view.named_elsewhere():
        return
    warns = view.warnings()
    fds = view.of("net.fd_exhausted")
    if fds:
        yield _out_of_descriptors(view, fds)
        return
    errors = view.of(*_GENERIC) + warns
    tbs = [
        (e, t)
        for e, t in view.errors()
        if _COMM_ERROR.search(f"{t.exception} {t.message}")
        and not PEER_TEXT.search(t.message)
        and not TIMEOUT_TEXT.search(t.message)
    ]
    if not errors and not tbs:
        return
    kinds = sorted({str(s.fields["kind"]) for _, s in errors if s.fields.get("kind")})
    ranks = ranks_of([s for _, s in errors] + [t for _, t in tbs])
    said = f" NCCL's last warning: `{quote(warns[-1:])}`." if warns else ""
    what = f"NCCL {', '.join(kinds)} error" if kinds else "a communication error"
    who = f" on {rank_label(ranks)}" if ranks else ""
    debug = view.has("nccl.version", "nccl.init", "nccl.network")
    yield Finding(
        title=f"{what}{who}, cause not visible",
        summary=(
            f"{what.capitalize()}{who}, and no known failure line says which call failed.{said}"
            + ("" if debug else " The logs have no NCCL_DEBUG=INFO output.")
        ),
        ranks=ranks,
        location=view.location(ranks, _COMM_ERROR),
        confidence=0.25,
        evidence=([e.id for e, _ in errors] + [e.id for e, _ in tbs])[:8],
        fix=(
            "Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE=nccl.%h.%p and "
            "read the first NCCL WARN before the error (or the line after `Last error:`): it "
            "names the failing call. Check the interface (`Bootstrap : Using`), the transports "
            "(`via P2P/SHM/NET`) and any `set by environment to` overrides."
        ),
        confirm="the NCCL_DEBUG=INFO log names a socket, shm, ibv_* or cudaIpc failure",
    )


def _out_of_descriptors(view: CommView, fds: list[Signal]) -> Finding:
    """EMFILE on a communication socket: the cause is the process's open-files limit, which
    NCCL's bootstrap and gloo's full mesh (a socket per peer) meet as the job grows."""
    ranks = ranks_of(s for _, s in fds)
    who = f" on {rank_label(ranks)}" if ranks else ""
    return Finding(
        title=f"a communication socket hit the open-files limit{who}",
        summary=f"A socket call failed with `Too many open files`{who} (`{_bare(fds)}`): NCCL's"
        " bootstrap and gloo open a socket per peer, and the process's open-files limit (1024"
        " by default) runs out as the job grows.",
        ranks=ranks,
        location=view.location(ranks, _COMM_ERROR),
        confidence=0.5,
        evidence=[e.id for e, _ in fds][:8],
        fix='Raise the open-files limit of the ranks before launch (`ulimit -n "$(ulimit -Hn)"`'
        " in the batch script, which srun passes on; LimitNOFILE for a service; --ulimit nofile"
        " for a container).",
        confirm="`cat /proc/PID/limits` of a rank shows `Max open files` at 1024, and `ls"
        " /proc/PID/fd | wc -l` near it",
    )


def _bare(items: list[Signal]) -> str:
    """A line quoted inside backticks, without its own."""
    return quote(items).replace("`", "")
