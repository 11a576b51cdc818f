"""`signal_probes`: ask the ranks that run triage.probe for an in-process snapshot.

This tool acts on the job (it sends a signal), so it is registered `read_only=False`: the
hang playbook runs it only when the user asked (`triage hang --signal-probe`), and no model
is ever offered it.
"""

from __future__ import annotations

from triage.job.probe_signal import WAIT_S, request_snapshots
from triage.models import Evidence
from triage.observations import ProbeRequest
from triage.registry import ToolOutput, tool


@tool(name="signal_probes", read_only=False)
def signal_probes(
    pids: list[int], paths: list[str] | None = None, wait_s: float = WAIT_S
) -> ToolOutput:
    """Send triage.probe's signal (SIGUSR1 by default) to the ranks whose probe thread owns
    it and whose kernel shows a handler for it, and wait for the snapshots they write (with
    their Flight Recorder dumps); the files join the paths the later steps read.

    Ranks without the probe, without a handler, or without torch are never signalled; each
    becomes a gap saying why. The job is not otherwise touched.
    """
    request = request_snapshots(pids, wait_s)
    dumps = request.dumps()
    context = {"paths": [*(paths or []), *request.evidence_paths(dumps)]}
    note = request.note()
    if not request.sent:
        return ToolOutput(gaps=request.gaps, context=context, notes=[note], text=note)
    payload = ProbeRequest(
        sent=request.sent,
        snapshot_files=request.files,
        flight_recorder_files=sorted(set(dumps.values())),
    )
    evidence = Evidence(
        id="probe:signal",
        kind=ProbeRequest.EVIDENCE_KIND,
        source="pids " + ", ".join(map(str, request.sent)),
        summary=note.removeprefix("--signal-probe: "),
        data=payload.model_dump(mode="json"),
    )
    return ToolOutput(evidence=[evidence], gaps=request.gaps, context=context, notes=[note])
