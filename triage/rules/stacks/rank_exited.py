"""hang.rank_exited from live processes: a rank has no process while its peers wait."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.observations import MissingRank
from triage.registry import EvidenceSet, rule
from triage.rules.stacks._hang_view import coverage_factor, hang_view
from triage.text import agree, plural, rank_label


@rule("stacks.rank_exited", "hang.rank_exited")
def rank_exited(evidence: EvidenceSet) -> Iterator[Finding]:
    """A rank the job needs has no live process, and the live ranks wait for it.

    What it detects:
    WORLD_SIZE (or LOCAL_WORLD_SIZE on this host) names ranks that no live process holds,
    or a rank's process is a zombie, while the live ranks wait in a collective or in
    process-group setup.

    Why it happens:
    The rank crashed (exception, segfault), was killed (host OOM killer, SIGKILL from a
    scheduler), or returned early. On NCCL its peers keep waiting until the watchdog timeout;
    before the first collective (rendezvous, init_process_group) every backend waits.

    Evidence:
    Process discovery: the expected rank set minus the ranks found alive; zombie status.
    Stacks: the survivors all wait on peers.

    Fix:
    Read the missing rank's own log or the launcher's exit report (`triage analyze LOG`)
    for its traceback, exit code or signal (-9 is usually the OOM killer), and fix that
    error; the waiting ranks are victims.

    Known false positives:
    Ranks on other hosts are only reported as missing when the job fits on this host: no
    launcher variable says it spans nodes (LOCAL_WORLD_SIZE below WORLD_SIZE, GROUP_RANK,
    SLURM_NNODES) and MASTER_ADDR is loopback or this host. Otherwise they are not
    inspected (a gap, and stacks.no_culprit_visible's lead), never exited.

    References:
    torch.distributed elastic error files; `dmesg | grep -i oom` on the rank's host.
    """
    view = hang_view(evidence)
    # A rank whose stack was read was alive then: gone by the process scan, the job was
    # ending (a timeout or the launcher's teardown), and it did not leave first.
    alive = {s.rank for g in view.groups for s in g.states if s.rank is not None}
    missing = [m for m in view.missing if m.rank not in alive]
    exited = sorted(
        {m.rank for m in missing if m.rank is not None}
        | {p.rank for p in view.zombies if p.rank is not None}
    )
    if not exited and not missing:
        return
    waiting = view.waiting
    majority = view.majority
    all_wait = bool(view.groups) and len(waiting) == len(view.groups)
    what = rank_label(exited) if exited else plural(len(missing), "local rank")
    count = len(exited) or len(missing)
    where = (
        f"; the {majority.label} {majority.verb('wait')} in {majority.where()}" if majority else ""
    )
    yield Finding(
        title=f"{what} exited while {'its' if count == 1 else 'their'} peers wait",
        summary=f"{what.capitalize()} {agree(count, 'have')} no live process{where}. The peers cannot finish without it.",
        ranks=exited,
        location=majority.location if majority else None,
        confidence=round((0.9 if all_wait else 0.65) * coverage_factor(view), 3),
        evidence=[
            e.id
            for e, m in evidence.payloads(MissingRank)
            if m.scope == "host" and m.rank not in alive
        ]
        + [f"process:{p.pid}" for p in view.zombies]
        + (majority.evidence[:3] if majority else []),
        fix=(
            f"Find why {what} died: its own log or the launcher's exit report (exit code, signal, "
            "traceback); -9/SIGKILL usually means the host OOM killer. The waiting ranks are victims."
        ),
    )
