"""comm.peer_failure from logs: ranks lost a peer; the culprit is the rank that failed first."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import CommView, comm_view
from triage.text import agree, rank_label, rank_subject


@rule("logs.peer_failure", "comm.peer_failure")
def peer_failure(evidence: EvidenceSet) -> Iterator[Finding]:
    """Ranks report a closed or reset connection; another rank's own failure caused it.

    What it detects:
    Lines and tracebacks that report a lost peer (gloo `Connection closed by peer`,
    `Connection reset by peer`, `ncclRemoteError` / `remote process exited or there was a
    network error`, NCCL `socketProgress: Connection closed by remote peer`, a store read of
    0 bytes, a broken pipe on a gloo or store socket), and the ranks whose own failure is
    none of these: a traceback with another exception, torchelastic's first observed
    failure, an exit by a fatal signal, or the rank ProcessGroupNCCL names in `remote error
    detected from rank: 6` (torch >= 2.6; 0.5, its own error not in the text).

    Why it happens:
    When one rank dies, every rank connected to it sees its sockets close. On gloo the peers
    fail within seconds with a connection error; on NCCL they see a remote error or time
    out. Their messages are the loudest and the least informative: the cause is in the log
    of the rank that died first.

    Evidence:
    Peer-symptom signals and tracebacks per rank (witnesses); tracebacks, launcher failure
    reports and exit signals of other ranks (origins), with the origin's user frame.

    Fix:
    Fix the origin rank's own error (its traceback, OOM, kill). When no origin is in the
    logs, collect every rank's log (torchrun --redirects 3 --tee 3, or --log-dir) and the
    launcher's failure report; `dmesg` on the hosts shows OOM kills.

    Known false positives:
    A real network fault (cable, switch, firewall) also resets connections; with no origin
    visible this rule still names the witnesses, at low confidence (lower still where the
    connection closed during NCCL's bootstrap or the job has one rank: comm.rendezvous).

    References:
    torch.distributed.elastic error propagation (`@record`, error files); gloo pair.cc
    "This is typically caused by a remote worker crashing".
    """
    view = comm_view(evidence)
    if not view.witnesses:
        return
    witness_ranks = sorted(r for r in view.witnesses if r is not None)
    witness_ids = [i for ids in view.witnesses.values() for i in ids]
    seen = rank_label(witness_ranks) if witness_ranks else "the logs"
    report = agree(len(witness_ranks) or 2, "report")  # 'the logs report'
    origins = view.origins
    if not origins:
        yield Finding(
            title="ranks lost a peer; the failing rank's log is not here",
            summary=(
                f"{seen.capitalize()} {report} a lost peer ({_said(view, witness_ids)}), which "
                "means another process died or the network dropped. No rank's own failure is "
                "in these logs."
            ),
            ranks=[],
            # closed while NCCL set up, or with no other rank to die: the setup's own sockets
            confidence=0.3 if view.closed_in_setup() else 0.45,
            evidence=witness_ids[:8],
            fix=(
                "Collect the logs of the other ranks and the launcher's failure report "
                "(torchrun --redirects 3 --tee 3 or --log-dir); the rank that died first holds "
                "the cause. Check `dmesg` for OOM kills on its host."
            ),
            confirm="another rank's log shows its own error before the connection errors",
        )
        return
    culprits = sorted({o.rank for o in origins if o.rank is not None})
    lead = origins[0]
    who = rank_label(culprits) if culprits else "a process without a rank prefix"
    where = f" at {lead.location}" if lead.location else ""
    # An exit code or signal alone is also what the OOM and hang rules read, with more to say.
    confidence = 0.65 if lead.traceback is not None else 0.5
    logged = sorted(r for r in view.witnesses if r is not None and r not in view.stopped)
    stopped = sorted(r for r in view.stopped if r is not None)
    victims = (
        " and ".join(
            part
            for part in (
                f"{rank_label(logged)} only {agree(len(logged), 'report')} losing it"
                if logged
                else "",
                f"{rank_subject(stopped, 'were')} stopped by the launcher (SIGTERM)"
                if stopped
                else "",
            )
            if part
        )
        or f"{seen} only {report} losing it"
    )
    yield Finding(
        title=f"{who} failed first; the peers lost the connection",
        summary=(
            f"{who.capitalize()} failed on {'its' if len(culprits) < 2 else 'their'} own"
            f" ({lead.what}){where}. "
            f"{victims[0].upper()}{victims[1:]}: "
            + ("it is a victim." if len(logged) + len(stopped) == 1 else "they are victims.")
        ),
        ranks=culprits,
        location=lead.location,
        other_locations=[o.location for o in origins[1:4] if o.location is not None],
        confidence=confidence,
        evidence=[i for o in origins for i in o.evidence][:6] + witness_ids[:4],
        fix=(
            f"Collect {who}'s own output (torchrun --redirects 3 --tee 3, or its node's log):"
            " its failure is the cause; the connection errors on the other ranks follow from it."
            if lead.named_by_peer
            else f"Fix {who}'s own error ({lead.what[:120]}); the connection errors on the other "
            "ranks follow from it and go away with it."
        ),
        confirm=f"{who}'s error precedes the connection errors of the other ranks",
    )


def _said(view: CommView, witness_ids: list[str]) -> str:
    """A witness's own words, quoted: what a rank logged is stated only as its lines say."""
    first = next(
        (s.text for items in view.by_name.values() for e, s in items if e.id in witness_ids),
        None,
    ) or next((f"{t.exception}: {t.message}" for e, t in view.errors() if e.id in witness_ids), "")
    return f"`{first[:120]}`" if first else "a closed or reset connection"
