"""Reports as they leave the machine: every text output (the terminal, `--json`, markdown,
HTML, `triage run`'s files, chat's `/save`) shows no credential, wherever the evidence
carried it: a log line, a rank's command line or environment, a local variable in a stack.
`--no-redact` turns it off for local debugging."""

from __future__ import annotations

from triage.models import Report
from triage.redact import redact_value


def redacted(report: Report) -> Report:
    """The report with secrets masked by name and by shape (`triage.redact`)."""
    data = report.model_dump(mode="python", round_trip=True)
    return Report.model_validate(redact_value(data))
