"""The triage loop: playbook steps -> tools -> evidence -> rules -> ranked report.

Data flows one way. The engine knows no tool or rule by name: the playbook says which
tools run with which context, and which cause IDs' rules decide. Every front end (the
CLI, chat, the MCP server, the demo and `triage run`) comes in through `diagnose`, or
through `follow` with a playbook it holds already, so one symptom and one set of targets
give the same report however triage is reached.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from triage.advice import useful_steps
from triage.grouping import group_ranks
from triage.models import Evidence, Finding, Gap, Report
from triage.observations import LogFile, LogSignal
from triage.observations.log_lines import is_printed
from triage.playbooks import (
    UNKNOWN_SYMPTOM,
    Playbook,
    load_playbooks,
    select_playbook,
    symptom_playbooks,
)
from triage.plugins import load_all, load_rules, rule_families
from triage.registry import (
    REGISTRY,
    RULES,
    EvidenceSet,
    Registry,
    ToolRun,
    run_rules,
    select,
)
from triage.taxonomy import CAUSES, canonical_symptom, symptom_of
from triage.text import plural

CLOSE_CALL = 0.15
# `analyze` lets the evidence name the symptom; the others fix it (earlier spellings too).
Symptom = Annotated[
    Literal["analyze", "hang", "comm-error", "oom", "config", "wrong-results"],
    BeforeValidator(lambda name: canonical_symptom(name) if isinstance(name, str) else name),
]


def job_targets(
    paths: Sequence[str] = (),
    pids: Sequence[int] = (),
    launcher_pid: int | None = None,
    flight_recorder: Sequence[str] = (),
    timeout_s: float | None = None,
    signal_probe: bool = False,
    collections: Sequence[str] = (),
    debug_server: str | None = None,
    slurm_job: str | None = None,
) -> dict[str, Any]:
    """The context a playbook starts from. Flight Recorder dumps are paths like any other:
    `collect_files` sorts every file by its content, not by the option that named it.
    `signal_probe` is the user's consent to the playbook step that signals ranks.
    `collections` are `triage collect` documents, other nodes' evidence gathered already.
    `debug_server` is HOST:PORT of PyTorch's debug server, which reaches every rank;
    `slurm_job` a running Slurm job whose nodes `srun --overlap` collects at once."""
    targets: dict[str, Any] = {"paths": [*flight_recorder, *paths], "pids": list(pids)}
    if collections:
        targets["collections"] = list(collections)
    if debug_server:
        targets["debug_server"] = debug_server
    if slurm_job:
        targets["slurm_job"] = slurm_job
    if launcher_pid is not None:
        targets["launcher_pid"] = launcher_pid
    if timeout_s is not None:
        targets["timeout_s"] = timeout_s
    if signal_probe:
        targets["signal_probe"] = True
    return targets


def diagnose(
    symptom: str | None, targets: dict[str, Any], plugin_dirs: list[Path] | None = None
) -> Report:
    """The one way in: a symptom (None or "analyze": let the evidence name it) and the
    job's targets, to a ranked report. Loads the tools and the user's plugins (a broken
    plugin raises ImportError or ValueError); `decide` imports the rules the evidence needs."""
    playbook, by_symptom = select_playbook(symptom, plugin_dirs)
    load_all(plugin_dirs, rules=False)  # `decide` imports the rules the evidence needs
    return follow(playbook, targets, by_symptom=by_symptom)


def follow(
    playbook: Playbook,
    targets: dict[str, Any],
    *,
    by_symptom: dict[str, Playbook] | None = None,
    notes: Sequence[str] = (),
    gaps: Sequence[Gap] = (),
) -> Report:
    """Run a playbook and decide. A playbook that does not know the symptom (the intake)
    hands over to the one its best hypothesis names, from `by_symptom` (default: the
    bundled playbooks). `notes` and `gaps` are what the caller knows already (`triage
    run`: how the job ended, what it set, which ranks it signalled)."""
    report = gather(playbook, targets)
    report.notes[:0] = notes
    report.gaps[:0] = gaps
    return redecide(playbook, report, by_symptom)


def redecide(
    playbook: Playbook, report: Report, by_symptom: dict[str, Playbook] | None = None
) -> Report:
    """The rules decide over all the report's evidence (again, when chat added some); a
    playbook that does not know the symptom hands over to the one its verdict names."""
    report = decide(playbook, report)
    if playbook.symptom != UNKNOWN_SYMPTOM:
        return report
    if by_symptom is None:
        by_symptom = symptom_playbooks(load_playbooks())
    return hand_over(report, by_symptom)


def found_evidence(report: Report) -> bool:
    """Whether anything beyond the list of files read was found: a log with no failure
    line is evidence beside its peers' (a rank that logged nothing), not on its own, unless
    a rule read something from where it stops. Readings of text that shows no failure (its
    metrics, a log that stops mid-run) are reported, but are not a failure found."""
    read = any(h.rule_id != _FALLBACK_RULE and not _without_failure(h) for h in report.hypotheses)
    return read or any(e.kind != LogFile.EVIDENCE_KIND and not _printed(e) for e in report.evidence)


def _fits_symptom(finding: Finding, playbook: Playbook) -> bool:
    """A guess at the symptom from text that shows no failure (metrics: wrong results; a log
    that stops: a hang) gives way to the symptom the user named: `triage oom` on a log of
    metrics is an OOM not shown, not wrong results."""
    guess = _without_failure(finding) and finding.cause_id.endswith(".unknown")
    named = playbook.symptom != UNKNOWN_SYMPTOM
    return not (named and guess) or symptom_of(finding.cause_id) == playbook.symptom


def _without_failure(finding: Finding) -> bool:
    """A finding of a rule that reads text showing no failure (metrics, a log that stops)."""
    return finding.rule_id in RULES and RULES[finding.rule_id].without_failure


def _guess(finding: Finding) -> bool:
    """A reading of text without a failure, or a family guessed below HAND_OVER_MIN (a
    failure whose exception is missing): neither keeps a last-resort reading or the named
    symptom's own unknown from standing beside it."""
    return _without_failure(finding) or finding.confidence < HAND_OVER_MIN


def _printed(item: Evidence) -> bool:
    """A line the job printed about itself (a rank's value, a metric): not a failure."""
    return item.kind == LogSignal.EVIDENCE_KIND and is_printed(str(item.data.get("signature")))


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
        report.notes += run.notes
    return report


def decide(playbook: Playbook, report: Report) -> Report:
    """Apply the rules to the gathered evidence and rank what they found. Every cause is
    weighed, whatever the symptom: a hang is often a transport's fault (peer access, an
    InfiniBand link, /dev/shm) and a communication error a rank's own; the symptom chose the
    tools that gathered the evidence, and its family's unknown is the answer when nothing
    reads. Where only last resorts read the text, the named symptom settles which of them
    stands first (SYMPTOM_CONFIRMS), and its unknown stands beside them when none is of its
    family (the rules that read the kinds of evidence gathered are imported first)."""
    load_rules(rule_families(["*"]), {e.kind for e in report.evidence})
    evidence = EvidenceSet(report.evidence)
    findings: list[Finding] = []
    try:
        findings = [finding for _, finding in run_rules(select(["*"]), evidence)]
    except Exception as exc:  # a rule bug must not lose the evidence already gathered
        report.notes.append(f"rule evaluation failed: {type(exc).__name__}: {exc}")
    findings = [f for f in findings if _fits_symptom(f, playbook)]
    named = playbook.symptom != UNKNOWN_SYMPTOM
    last_resorts_only = named and all(_last_resort(f) or _guess(f) for f in findings)
    if last_resorts_only:
        findings = [_confirmed(f, playbook.symptom) for f in findings]
    own = any(symptom_of(f.cause_id) == playbook.symptom for f in findings)
    if playbook.fallback_cause and not own and (last_resorts_only or all(map(_guess, findings))):
        # nothing read a failure (or only guessed its family from generic words): the named
        # symptom's unknown stands beside what context says
        findings.append(_fallback(playbook, report))
    report.hypotheses = rank(findings)
    report.rank_groups = group_ranks(evidence)
    report.next_steps = _next_steps(playbook, report)
    return report


#: A last resort's reading of the family the user named is this confident at least: the
#: symptom is the condition the reading waited on (an exception on one rank is the rank
#: whose exit its peers waited for only if the job hung), so it ranks above the last
#: resorts of other families, which guess a family from generic words alone.
SYMPTOM_CONFIRMS = 0.25


def _confirmed(finding: Finding, symptom: str) -> Finding:
    """A last-resort finding of the named symptom's family, raised to SYMPTOM_CONFIRMS."""
    if not (_last_resort(finding) and symptom_of(finding.cause_id) == symptom):
        return finding
    if finding.confidence >= SYMPTOM_CONFIRMS:
        return finding
    return finding.model_copy(update={"confidence": SYMPTOM_CONFIRMS})


#: A verdict below this names no symptom: its family is itself a guess (a failure whose
#: exception is missing), so the intake's own next steps (every rank's log) stand. So does
#: a reading of text that shows no failure (`Rule.without_failure`).
HAND_OVER_MIN = 0.1


def hand_over(report: Report, by_symptom: dict[str, Playbook]) -> Report:
    """The intake's best hypothesis names the symptom; its playbook gives the next steps."""
    top = report.verdict
    named = top is not None and top.confidence >= HAND_OVER_MIN and not _without_failure(top)
    playbook = by_symptom.get(symptom_of(top.cause_id)) if top and named else None
    if playbook is not None:
        report.symptom, report.playbook = playbook.symptom, playbook.name
        report.next_steps = _next_steps(playbook, report)
    return report


def rank(findings: list[Finding]) -> list[Finding]:
    """Best first; one hypothesis per cause, the most confident one (on a tie, one that names
    the user line: a Flight Recorder dump without stack frames sees the ranks, not the line).
    A family's `unknown` (its failure is visible, its cause is not) gives way to any cause of
    that family, and a last-resort rule's finding to any other rule's."""
    if any(not _last_resort(f) and not _guess(f) for f in findings):
        findings = [f for f in findings if not _last_resort(f)]
    named = {symptom_of(f.cause_id) for f in findings if not f.cause_id.endswith(".unknown")}
    findings = [
        f
        for f in findings
        if not (f.cause_id.endswith(".unknown") and symptom_of(f.cause_id) in named)
    ]
    best: dict[str, Finding] = {}
    for finding in findings:
        kept = best.get(finding.cause_id)
        if kept is None or _strength(finding) > _strength(kept):
            best[finding.cause_id] = finding
    return sorted(best.values(), key=lambda f: (-f.confidence, f.cause_id))


def _last_resort(finding: Finding) -> bool:
    """A last-resort rule's finding, or the playbook's fallback (standing beside readings of
    context, `decide`)."""
    known = RULES.get(finding.rule_id)
    return finding.rule_id == _FALLBACK_RULE or (known is not None and known.last_resort)


def _strength(finding: Finding) -> tuple[float, bool]:
    return finding.confidence, finding.location is not None


#: The rule ID of the playbook's fallback: no rule read anything.
_FALLBACK_RULE = "engine.fallback"


def _fallback(playbook: Playbook, report: Report) -> Finding:
    cause = playbook.fallback_cause or f"{playbook.symptom}.unknown"
    seen = plural(len(report.evidence), "evidence item") if report.evidence else "no evidence"
    return Finding(
        rule_id=_FALLBACK_RULE,
        cause_id=cause,
        title=CAUSES.get(cause, cause),
        summary=f"No rule matched ({seen}, {plural(len(report.gaps), 'gap')}); the cause is not "
        "visible yet.",
        confidence=0.1,
        evidence=[e.id for e in report.evidence[:20]],
        fix="Gather the evidence the next steps name and run triage again.",
    )


def _next_steps(playbook: Playbook, report: Report) -> list[str]:
    """The top fix, how to tell close calls apart, the gaps' hints, then the playbook's
    steps that the evidence does not show done already; hints and steps only where they fit
    the job's backend and settings (triage.advice)."""
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
    decided = len(steps)
    for hint in (gap.hint for gap in report.gaps if gap.hint):
        if not any(hint in step for step in steps):  # the top fix may say it already
            steps.append(hint)
    steps += [
        s.text for s in playbook.next_steps if s.text not in steps and s.applies(report.evidence)
    ]
    return steps[:decided] + useful_steps(steps[decided:], report)
