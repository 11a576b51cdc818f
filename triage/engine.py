"""The triage loop: playbook steps -> tools -> evidence -> rules -> ranked report.

Data flows one way. The engine knows no tool or rule by name: the playbook says
which tools run with which context, and which cause IDs' rules decide.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from triage.grouping import group_ranks
from triage.models import Finding, Report
from triage.playbooks import Playbook
from triage.registry import REGISTRY, EvidenceSet, Registry, ToolRun, run_rules, select
from triage.taxonomy import CAUSES, symptom_of

CLOSE_CALL = 0.15


def gather(playbook: Playbook, targets: dict[str, Any], registry: Registry = REGISTRY) -> Report:
    """Run the playbook's tools in order; each may add context for the steps after it.

    A `background` step runs in a thread alongside the steps after it (a py-spy dump waits
    on subprocesses meanwhile); every result lands in the report in playbook order.
    """
    report = Report(symptom=playbook.symptom, playbook=playbook.name, targets=targets)
    context = {k: v for k, v in targets.items() if v not in (None, [], "")}
    runs: list[ToolRun | Future[ToolRun]] = []
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="triage-step") as pool:
        for step in playbook.steps:
            if any(not context.get(key) for key in step.needs):
                continue
            if step.needs_any and not any(context.get(key) for key in step.needs_any):
                continue
            try:
                spec_params = registry.get(step.tool).parameter_names()
            except KeyError:  # unknown or broken: `run` records why
                spec_params = set()
            params = {k: v for k, v in context.items() if k in spec_params} | step.args
            if step.background:
                runs.append(pool.submit(registry.run, step.tool, params))
                continue
            run = registry.run(step.tool, params)
            context.update(run.context)
            runs.append(run)
    for item in runs:
        run = item.result() if isinstance(item, Future) else item
        report.tool_runs.append(run.result)
        report.evidence += run.evidence
        report.gaps += run.gaps
    return report


def decide(playbook: Playbook, report: Report) -> Report:
    """Apply the playbook's rules to the gathered evidence and rank what they found."""
    evidence = EvidenceSet(report.evidence)
    findings: list[Finding] = []
    try:
        findings = [finding for _, finding in run_rules(select(playbook.causes), evidence)]
    except Exception as exc:  # a rule bug must not lose the evidence already gathered
        report.notes.append(f"rule evaluation failed: {type(exc).__name__}: {exc}")
    if not findings and playbook.fallback_cause:
        findings.append(_fallback(playbook, report))
    report.hypotheses = rank(findings)
    report.rank_groups = group_ranks(evidence)
    report.next_steps = _next_steps(playbook, report)
    return report


def triage(playbook: Playbook, targets: dict[str, Any], registry: Registry = REGISTRY) -> Report:
    return decide(playbook, gather(playbook, targets, registry))


def analyze(
    intake: Playbook,
    by_symptom: dict[str, Playbook],
    targets: dict[str, Any],
    registry: Registry = REGISTRY,
) -> Report:
    """Symptom unknown: gather what every symptom needs, let every rule speak, and let the
    best hypothesis name the symptom whose playbook then supplies the next steps."""
    return hand_over(triage(intake, targets, registry), by_symptom)


def hand_over(report: Report, by_symptom: dict[str, Playbook]) -> Report:
    """The intake's best hypothesis names the symptom; its playbook gives the next steps."""
    top = report.verdict
    playbook = by_symptom.get(symptom_of(top.cause_id)) if top else None
    if playbook is not None:
        report.symptom, report.playbook = playbook.symptom, playbook.name
        report.next_steps = _next_steps(playbook, report)
    return report


def rank(findings: list[Finding]) -> list[Finding]:
    """Best first; one hypothesis per cause, the most confident one."""
    best: dict[str, Finding] = {}
    for finding in findings:
        kept = best.get(finding.cause_id)
        if kept is None or finding.confidence > kept.confidence:
            best[finding.cause_id] = finding
    return sorted(best.values(), key=lambda f: (-f.confidence, f.cause_id))


def _fallback(playbook: Playbook, report: Report) -> Finding:
    cause = playbook.fallback_cause or f"{playbook.symptom}.unknown"
    seen = f"{len(report.evidence)} evidence items" if report.evidence else "no evidence"
    return Finding(
        rule_id="engine.fallback",
        cause_id=cause,
        title=CAUSES.get(cause, cause),
        summary=f"No rule matched ({seen}, {len(report.gaps)} gaps); the cause is not visible yet.",
        confidence=0.1,
        evidence=[e.id for e in report.evidence[:20]],
        fix="Gather the evidence the next steps name and run triage again.",
    )


def _next_steps(playbook: Playbook, report: Report) -> list[str]:
    """The top fix, how to tell close calls apart, the gaps' hints, then the playbook's
    steps that the evidence does not show done already."""
    findings = report.hypotheses
    steps = (
        [f"Fix for the top hypothesis: {findings[0].fix}"] if findings and findings[0].fix else []
    )
    if len(findings) > 1 and findings[0].confidence - findings[1].confidence < CLOSE_CALL:
        first, second = findings[:2]
        tell = "; ".join(f"{f.cause_id} if {f.confirm}" for f in (first, second) if f.confirm)
        steps.append(
            f"{first.cause_id} and {second.cause_id} are close calls"
            + (f". It is {tell}." if tell else "; gather more evidence before acting.")
        )
    steps += [gap.hint for gap in report.gaps if gap.hint and gap.hint not in steps]
    steps += [
        s.text for s in playbook.next_steps if s.text not in steps and s.applies(report.evidence)
    ]
    return steps
